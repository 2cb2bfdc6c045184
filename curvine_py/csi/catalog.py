"""The volumes on the master: each one a directory carrying its record (an xattr), and an index
directory holding one symlink per volume id -> the volume's directory.

The index is what ListVolumes pages through (sorted by id) and how an id is resolved; the record
on the directory is what says a directory really is that volume (an index entry whose directory
lost or changed its record is stale and ignored). Creating writes the directory and its record
first and the index entry last, so a crash in between leaves nothing listed, and a retried
CreateVolume (same name, same id) finishes the job.
"""
from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass

from curvine_py.client import CurvineClient
from curvine_py.core.domain import FileType
from curvine_py.core.errors import AlreadyExists, NoData, NotFound
from curvine_py.csi.volumes import RECORD_XATTR, VolumeRecord, is_volume_id

log = logging.getLogger(__name__)

DEFAULT_INDEX_DIR = "/.csi/volumes"


@dataclass(frozen=True, slots=True)
class IndexEntry:
    volume_id: str
    path: str


class Catalog:
    def __init__(self, client: CurvineClient, index_dir: str = DEFAULT_INDEX_DIR) -> None:
        self.client = client
        self.index_dir = index_dir

    # -- records on directories --------------------------------------------------------------
    def record_at(self, path: str) -> VolumeRecord | None:
        """The record of the directory at `path`; None if there is no such directory or record."""
        try:
            attr = self.client.master.resolve(path)
        except NotFound:
            return None
        if attr.type != FileType.DIRECTORY:
            return None
        try:
            return VolumeRecord.decode(self.client.master.getxattr(attr.ino, RECORD_XATTR))
        except NoData:
            return None

    def write_record(self, record: VolumeRecord) -> None:
        attr = self.client.master.resolve(record.path)
        self.client.master.setxattr(attr.ino, RECORD_XATTR, record.encode())

    def make_directory(self, path: str) -> bool:
        """mkdir -p; False when the directory already existed."""
        parent = posixpath.dirname(path)
        if parent != "/":
            self.client.fs.mkdir(parent, parents=True)
        try:
            self.client.fs.mkdir(path)
            return True
        except AlreadyExists:
            return False

    # -- the index ---------------------------------------------------------------------------
    def _entry_path(self, volume_id: str) -> str:
        return f"{self.index_dir}/{volume_id}"

    def indexed_path(self, volume_id: str) -> str | None:
        if not is_volume_id(volume_id):
            return None
        try:
            attr = self.client.master.resolve(self._entry_path(volume_id), follow_symlinks=False)
        except NotFound:
            return None
        if attr.type != FileType.SYMLINK:
            return None
        return self.client.master.readlink(attr.ino)

    def lookup(self, volume_id: str) -> VolumeRecord | None:
        """The live volume with this id, or None (unknown id, stale entry, malformed id)."""
        path = self.indexed_path(volume_id)
        if path is None:
            return None
        record = self.record_at(path)
        return record if record is not None and record.volume_id == volume_id else None

    def add_to_index(self, record: VolumeRecord) -> None:
        self.client.fs.mkdir(self.index_dir, parents=True)
        try:
            self.client.fs.symlink(record.path, self._entry_path(record.volume_id))
        except AlreadyExists:
            if self.indexed_path(record.volume_id) != record.path:
                raise

    def remove_from_index(self, volume_id: str) -> None:
        try:
            self.client.fs.rm(self._entry_path(volume_id))
        except NotFound:
            pass

    def entries(self, after: str = "", limit: int = 0) -> tuple[list[IndexEntry], bool]:
        """Index entries with ids > `after`, in id order, at most `limit` (0: all); and whether more follow."""
        try:
            index = self.client.master.resolve(self.index_dir)
        except NotFound:
            return [], False
        found: list[IndexEntry] = []
        cursor = after
        while True:
            reply = self.client.master.readdir(index.ino, after_name=cursor, limit=500)
            for entry in sorted(reply.entries, key=lambda e: e.name):
                if not is_volume_id(entry.name) or entry.name <= after or entry.attr.type != FileType.SYMLINK:
                    continue
                if limit and len(found) == limit:
                    return found, True
                found.append(IndexEntry(entry.name, self.client.master.readlink(entry.attr.ino)))
            if not reply.more or not reply.entries:
                return found, False
            cursor = max(e.name for e in reply.entries)
