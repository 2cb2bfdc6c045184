"""The one place that talks to the master about space: directory quotas (a volume's capacity) and
the cluster's free space (GetCapacity).

Quotas are the master's `client.fs.set_quota(path, max_bytes=..., max_inodes=...)` and
`client.fs.quota(path)`. A master without them (an older cluster) still gets volumes, with their
capacity recorded on the volume but not enforced: that is logged as a warning at every such call,
never hidden.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from curvine_py.client import CurvineClient

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClusterSpace:
    capacity: int
    available: int


def enforce_capacity(client: CurvineClient, path: str, capacity: int) -> bool:
    """Sets the byte quota of a volume's directory (0: no limit). False when the master cannot."""
    set_quota = getattr(client.fs, "set_quota", None)
    if set_quota is None:
        log.warning("the client has no directory quotas: capacity %d of %s is recorded, not enforced",
                    capacity, path)
        return False
    set_quota(path, max_bytes=capacity)
    return True


def cluster_space(client: CurvineClient) -> ClusterSpace:
    reply = client.master.statfs()
    return ClusterSpace(int(reply.capacity), int(reply.available))
