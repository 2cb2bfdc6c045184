"""The one place that talks to the master about space: a volume's capacity is the byte quota of its
directory (`client.fs.set_quota`, enforced by the master with EDQUOT; a mount rooted there reports
it as its size), and GetCapacity is the free space under a StorageClass's base path."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from curvine_py.client import CurvineClient
from curvine_py.core.errors import NotFound

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClusterSpace:
    capacity: int
    available: int


def enforce_capacity(client: CurvineClient, path: str, capacity: int, max_inodes: int = 0) -> None:
    """Sets the byte and inode quota of a volume's directory (0: no limit)."""
    client.fs.set_quota(path, max_bytes=capacity, max_inodes=max_inodes)


def space_under(client: CurvineClient, base_path: str) -> ClusterSpace:
    """The space a volume under `base_path` can have: the cluster's, bounded by a quota an
    administrator put on the base path or above it (the base path may not exist yet)."""
    path = base_path
    while True:
        try:
            usage = client.fs.df(path)
            return ClusterSpace(usage.capacity, usage.available)
        except NotFound:
            if path == "/":
                raise
            path = path.rsplit("/", 1)[0] or "/"
