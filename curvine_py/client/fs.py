"""Path-level namespace API (what `curvine-py fs` and applications call).

Paths are absolute within the cluster namespace; `..` never climbs above `/`.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import posixpath
import tempfile
import time
from collections.abc import Callable, Iterator

from curvine_py.client import puttemp
from curvine_py.client.files import BlockStore, CurvineFile
from curvine_py.client.master import MasterClient
from curvine_py.client.types import DiskUsage, FileStatus, Quota
from curvine_py.core import layout
from curvine_py.core.domain import FileType, InodeId, NewNode, Policy, PolicyAt
from curvine_py.core.errors import AlreadyExists, CurvineError, InvalidArgument, IsADirectory, NotFound
from curvine_py.core.keys import NAME_MAX, split_path
from curvine_py.core.posix import ROOT_INO

log = logging.getLogger(__name__)

COPY_CHUNK = 16 << 20


def _umask() -> int:
    """The process umask, read without setting it (os.umask would race with other threads)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def normalize(path: str) -> str:
    return "/" + "/".join(split_path(path))


def _stem(name: str, extra: int) -> str:
    """`name` cut so that `extra` more bytes still make a legal name (NAME_MAX): a temporary name
    beside a file with a long name must not fail where the file itself would not."""
    while len(name.encode("utf-8", "surrogateescape")) + extra > NAME_MAX:
        name = name[:-1]
    return name


def _local_checksum(source: io.BufferedIOBase, length: int, buffer: memoryview) -> int:
    """The block checksum (layout.object_checksum) of the next `length` bytes of `source`, read
    one chunk at a time: 0 if the file ends first (no stored block has checksum 0)."""
    digests = []
    left = length
    while left:
        piece = buffer[:min(left, layout.CHUNK_SIZE)]
        got = source.readinto(piece)
        if got != len(piece):
            return 0
        digests.append(layout.checksum(piece))
        left -= got
    return layout.combine(digests)


class FileSystem:
    def __init__(self, master: MasterClient, blocks: BlockStore, node: str) -> None:
        self.master = master
        self._blocks = blocks
        self._node = node

    def _parent(self, path: str) -> tuple[InodeId, str]:
        parts = split_path(path)
        if not parts:
            raise InvalidArgument("the root has no parent")
        parent = self.master.resolve("/" + "/".join(parts[:-1])) if len(parts) > 1 else None
        return (parent.ino if parent else ROOT_INO), parts[-1]

    def stat(self, path: str, follow_symlinks: bool = True) -> FileStatus:
        return FileStatus.of(normalize(path), self.master.resolve(normalize(path), follow_symlinks))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except NotFound:
            return False

    def ls(self, path: str = "/") -> list[FileStatus]:
        base = normalize(path)
        attr = self.master.resolve(base)
        if attr.type != FileType.DIRECTORY:
            return [FileStatus.of(base, attr)]
        return [FileStatus.of(posixpath.join(base, e.name), e.attr) for e in self.master.readdir_all(attr.ino)]

    def mkdir(self, path: str, mode: int = 0o755, parents: bool = False) -> FileStatus:
        parts = split_path(path)
        if parents:
            parent, current = ROOT_INO, ""
            for name in parts:
                current += "/" + name
                try:
                    attr = self.master.create(NewNode(parent, name, FileType.DIRECTORY, mode))
                except AlreadyExists:
                    attr = self.master.lookup(parent, name)
                parent = attr.ino
            return FileStatus.of(normalize(path), attr)
        parent, name = self._parent(path)
        return FileStatus.of(normalize(path), self.master.create(NewNode(parent, name, FileType.DIRECTORY, mode)))

    def rm(self, path: str, recursive: bool = False) -> None:
        parent, name = self._parent(path)
        attr = self.master.lookup(parent, name)
        if attr.type == FileType.DIRECTORY:
            if recursive:
                for entry in self.master.readdir_all(attr.ino):
                    self.rm(posixpath.join(normalize(path), entry.name), recursive=True)
            self.master.unlink(parent, name, directory=True)
        else:
            self.master.unlink(parent, name)

    def rename(self, src: str, dst: str, flags: int = 0) -> None:
        parent, name = self._parent(src)
        new_parent, new_name = self._parent(dst)
        self.master.rename(parent, name, new_parent, new_name, flags)

    def symlink(self, target: str, path: str) -> FileStatus:
        parent, name = self._parent(path)
        return FileStatus.of(normalize(path), self.master.create(
            NewNode(parent, name, FileType.SYMLINK, 0o777, target=target)))

    def open(self, path: str, mode: str = "rb") -> CurvineFile:
        """Modes: rb, wb (create/truncate), xb (exclusive create), ab (append), r+b (update)."""
        flags = set(mode) - {"b"}
        if not flags <= {"r", "w", "x", "a", "+"} or len(flags & {"r", "w", "x", "a"}) != 1:
            raise InvalidArgument(f"unsupported mode {mode!r}")
        if "r" in flags:
            attr = self.master.resolve(normalize(path))
        else:
            parent, name = self._parent(path)
            attr = self.master.create(NewNode(parent, name, FileType.REGULAR, 0o644, exclusive="x" in flags,
                                              truncate="w" in flags))
        if attr.type == FileType.DIRECTORY:
            raise IsADirectory(f"{path} is a directory")
        writable = bool(flags & {"w", "x", "a", "+"})
        handle = CurvineFile(self._blocks, attr, node=self._node, writable=writable, append="a" in flags)
        if "a" in flags:
            handle.seek(0, os.SEEK_END)
        return handle

    def put(self, local_path: str, path: str, progress: Callable[[int], None] | None = None) -> FileStatus:
        """Uploads into a hidden temporary name beside `path`, renamed over it once every byte is
        committed: a failed put leaves nothing visible and an existing file as it was. Then the
        temporaries of `path` that earlier puts killed midway left are removed (client/puttemp.py).
        `progress(n)` is called after each `n` bytes written (the CLI's progress bar)."""
        parent, name = self._parent(path)
        owner = puttemp.this_process(self._node)
        temporary = puttemp.temporary_name(name, owner)
        with open(local_path, "rb") as source:
            attr = self.master.create(NewNode(parent, temporary, FileType.REGULAR, 0o644))
            try:
                with CurvineFile(self._blocks, attr, node=self._node, writable=True) as target:
                    while chunk := source.read(COPY_CHUNK):
                        target.write(chunk)
                        if progress is not None:
                            progress(len(chunk))
                self.master.rename(parent, temporary, parent, name)
            except BaseException:
                with contextlib.suppress(CurvineError):
                    self.master.unlink(parent, temporary)
                raise
        try:
            self.remove_stale_temporaries(parent, name, here=owner.host)
        except CurvineError as exc:   # the put itself succeeded
            log.warning("put %s: leftover temporaries not swept: %s", path, exc)
        return self.stat(path)

    def remove_stale_temporaries(self, parent: InodeId, name: str, *, here: str,
                                 now_ns: int | None = None) -> list[str]:
        """Unlinks the temporaries of `name` in `parent` whose writer is gone (puttemp.is_stale);
        returns their names. They sort right after their common prefix (names compare as bytes on
        both engines), so this reads only the pages that hold them."""
        head = puttemp.prefix(name)
        now = time.time_ns() if now_ns is None else now_ns
        removed: list[str] = []
        after = head
        while True:
            page = self.master.readdir(parent, after, limit=16)   # usually none: one small page
            for entry in page.entries:
                temporary = puttemp.temporary_of(name, entry.name)
                if temporary is None:
                    return removed
                touched = max(entry.attr.mtime_ns, entry.attr.ctime_ns)
                if puttemp.is_stale(temporary.owner, touched, now_ns=now, here=here):
                    with contextlib.suppress(NotFound):
                        self.master.unlink(parent, entry.name)
                        log.info("removed %s, left by an interrupted put", entry.name)
                        removed.append(entry.name)
            if not page.more or not page.entries:
                return removed
            after = page.entries[-1].name

    def get(self, path: str, local_path: str, progress: Callable[[int], None] | None = None) -> int:
        """Downloads into a temporary file beside `local_path`, renamed over it on success: a
        failed get leaves no partial output. `progress(n)` is called after each `n` bytes read."""
        directory = os.path.dirname(os.path.abspath(local_path))
        # mkstemp adds 8 random characters after the prefix.
        fd, temporary = tempfile.mkstemp(prefix=f".{_stem(os.path.basename(local_path), 10)}.", dir=directory)
        try:
            with self.open(path, "rb") as source, os.fdopen(fd, "wb") as target:
                buffer = memoryview(bytearray(COPY_CHUNK))
                total = 0
                while n := source.readinto(buffer):
                    target.write(buffer[:n])
                    total += n
                    if progress is not None:
                        progress(n)
            os.chmod(temporary, 0o666 & ~_umask())
            os.replace(temporary, local_path)
            return total
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def same_content(self, local_path: str, path: str) -> bool:
        """Whether regular file `path` holds exactly the bytes of local file `local_path`, found
        without reading `path` from any worker: the master keeps each block's xxh3 checksum (over
        the block's 1 MiB chunk digests, computed by the writer, core/layout.py), so the local file
        is hashed the same way block by block (one read of it, at memory speed) and compared.
        Anything not known to match is False: another size or type, a block map with a hole or
        that does not cover the size, a block without a checksum (0: shortened by a truncate) or
        without a copy on a live worker (GetBlocks also lists copies on registered workers past
        their lease, which may be dead: skipping an upload on their word could lose the file)."""
        try:
            attr = self.master.resolve(normalize(path), follow_symlinks=False)
        except NotFound:
            return False
        with open(local_path, "rb") as source:
            if attr.type != FileType.REGULAR or attr.size != os.fstat(source.fileno()).st_size:
                return False
            blocks = sorted(self.master.get_blocks(attr.ino).blocks, key=lambda b: b.index)
            if [b.index for b in blocks] != list(range(len(blocks))) or sum(b.length for b in blocks) != attr.size:
                return False
            if any(b.length != blocks[0].length for b in blocks[:-1]):
                return False   # offsets are index * block size: every block but the last is full
            buffer = memoryview(bytearray(layout.CHUNK_SIZE))
            live = self._blocks.membership.view().workers
            for block in blocks:
                if not block.checksum or not any(w in live for w in block.worker_ids):
                    return False
                if _local_checksum(source, block.length, buffer) != block.checksum:
                    return False
        return True

    def walk(self, path: str) -> Iterator[FileStatus]:
        for entry in self.ls(path):
            yield entry
            if entry.is_dir and entry.path != normalize(path):
                yield from self.walk(entry.path)

    def du(self, path: str) -> int:
        status = self.stat(path)
        if not status.is_dir:
            return status.size
        return sum(e.size for e in self.walk(path) if e.kind == "file")

    def df(self, path: str = "/") -> DiskUsage:
        """Space and inodes as seen from `path`: the cluster's, bounded by the nearest directory quota
        at or above it (its byte limit is then the capacity, as in a mount rooted there)."""
        s = self.master.statfs(self.master.resolve(normalize(path)).ino)
        return DiskUsage(capacity=s.capacity, used=s.used, available=s.available, files=s.files,
                         max_files=s.max_files, block_size=s.block_size)

    def set_quota(self, path: str, *, max_bytes: int = 0, max_inodes: int = 0) -> None:
        """Limits directory `path`'s subtree to `max_bytes` bytes and `max_inodes` names (0 = unlimited;
        both 0 removes the quota). Creates, links, renames and writes past a limit fail with
        QuotaExceeded (EDQUOT). A limit below the current usage is allowed (then only shrinking passes)."""
        if max_bytes < 0 or max_inodes < 0:
            raise InvalidArgument("quota limits must be >= 0 (0 = unlimited)")
        self.master.set_quota(normalize(path), max_bytes, max_inodes)

    def quota(self, path: str) -> Quota:
        """Directory `path`'s quota and usage; limits 0 when it has none (the usage is counted then)."""
        q = self.master.get_quota(normalize(path))
        return Quota(max_bytes=q.max_bytes, max_inodes=q.max_inodes, used_bytes=q.used_bytes,
                     used_inodes=q.used_inodes)

    def set_policy(self, path: str, policy: Policy) -> PolicyAt:
        return self.master.set_policy(normalize(path), policy)

    def get_policy(self, path: str) -> PolicyAt:
        return self.master.get_policy(normalize(path))
