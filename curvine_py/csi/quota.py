"""The one place that talks to the master about space: a volume's capacity is the byte quota of its
directory (`client.fs.set_quota`, enforced by the master with EDQUOT; a mount rooted there reports
it as its size), and GetCapacity is the cluster's free space."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from curvine_py.client import CurvineClient

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClusterSpace:
    capacity: int
    available: int


def enforce_capacity(client: CurvineClient, path: str, capacity: int) -> None:
    """Sets the byte quota of a volume's directory (0: no limit)."""
    client.fs.set_quota(path, max_bytes=capacity)


def cluster_space(client: CurvineClient) -> ClusterSpace:
    usage = client.fs.df("/")
    return ClusterSpace(usage.capacity, usage.available)
