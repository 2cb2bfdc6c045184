"""Which workers receive a new file block: weighted rendezvous on the block id, or the writer's node.

Pure functions over the live worker list (no I/O), so the rules are tested in memory.
"""
from __future__ import annotations

from collections.abc import Sequence

from curvine_py.core.hashing import Node, Rendezvous
from curvine_py.master.types import PLACEMENT_LOCAL, StorageClass, WorkerInfo

GiB = 1 << 30


def weight(worker: WorkerInfo) -> float:
    """Capacity in GiB, so a 2 TB node gets twice the blocks of a 1 TB node; 1 when unknown."""
    return worker.capacity / GiB if worker.capacity > 0 else 1.0


def replica_count(storage_class: StorageClass, replicas: int, live: int, durable_default: int) -> int:
    """Explicit replicas win; otherwise durable = min(durable_default, live), cache = 1. Never more
    than the live workers (a copy per worker at most)."""
    if replicas > 0:
        wanted = replicas
    elif storage_class == StorageClass.CACHE:
        wanted = 1
    else:
        wanted = durable_default
    return max(0, min(wanted, live))


def copies_wanted(storage_class: StorageClass, replicas: int, live: int, durable_default: int) -> int:
    """How many copies a block should have, for the replica accounting: an explicit count stands
    even above the live workers (a block short of it is under-replicated, not healthy); the
    defaults are bounded by them as replica_count's, so a one-worker cluster is not in alarm."""
    return replicas if replicas > 0 else replica_count(storage_class, replicas, live, durable_default)


def choose_workers(block_id: int, live: Sequence[WorkerInfo], count: int, placement: str,
                   client_node: str) -> list[str]:
    """`count` distinct worker ids, best first. "local": the writer's node first (if it runs a live
    worker), the remaining replicas by rendezvous; otherwise (or as a fallback) pure rendezvous."""
    if count <= 0 or not live:
        return []
    ring = Rendezvous([Node(w.worker_id, weight(w)) for w in live])
    key = str(block_id)
    if placement == PLACEMENT_LOCAL and client_node:
        local = sorted(w.worker_id for w in live if w.node == client_node)
        if local:
            # Several workers on one node: spread blocks over them by hash, still node-local.
            first = Rendezvous([Node(w, 1.0) for w in local]).owners(key, 1)[0]
            rest = [w for w in ring.rank(key) if w != first]
            return [first] + rest[:count - 1]
    return ring.owners(key, count)
