"""The cluster's values, shared by every role: workers and the membership view, mounts, the
cluster report and fsck's findings (rpc/convert.py turns them into protobuf and back).

Frozen slotted dataclasses; no I/O and no generated code here. The namespace's values (inodes,
blocks, policies, quotas) are in core/domain.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from curvine_py.core.domain import QuotaInfo


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    worker_id: str
    host: str = ""
    port: int = 0
    unix_socket: str = ""
    node: str = ""
    capacity: int = 0
    used: int = 0
    available: int = 0
    lm_port: int = 0
    live: bool = False
    last_heartbeat_ms: int = 0
    blocks: int = 0
    objects: int = 0
    evictions: int = 0
    free_space_ratio: float = 0.0   # the worker's disk reserve (heartbeat), not persisted
    reserve_bytes: int = 0
    fs_free_bytes: int = 0
    hits: int = 0                   # KV lookups since the worker started (heartbeat), not persisted
    misses: int = 0
    metrics_port: int = 0           # its /metrics port (registration, heartbeat), not persisted


@dataclass(frozen=True, slots=True)
class MembershipView:
    epoch: int
    workers: tuple[WorkerInfo, ...]
    cluster_id: str


@dataclass(frozen=True, slots=True)
class MountInfo:
    """A mount as it describes itself with every RenewDirLeases; in a report, with the wall-clock
    time of its last heartbeat (as WorkerInfo's)."""

    node: str
    mountpoint: str
    metrics_port: int = 0           # its /metrics port on `node`, 0 = off
    last_heartbeat_ms: int = 0      # in a report only


@dataclass(frozen=True, slots=True)
class Replication:
    """Replica counts against the policies, and the repairs done since the master started."""

    under_replicated: int = 0
    lost: int = 0
    surplus: int = 0
    lost_files: tuple[str, ...] = ()     # files with a lost block (the first 100)
    repaired_blocks: int = 0
    repaired_bytes: int = 0
    repair_failures: int = 0
    repair_rate: int = 0                 # bytes/s, 0 = repair is off
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class ClusterReport:
    cluster_id: str
    epoch: int
    workers: tuple[WorkerInfo, ...]     # live and lost
    capacity: int
    used: int
    available: int
    files: int
    directories: int
    blocks: int
    dir_leases: int = 0                  # held by mounts now
    quotas: tuple[QuotaInfo, ...] = ()   # every directory quota
    replication: Replication = Replication()
    metrics_port: int = 0                # the master's /metrics port, 0 = off
    status_port: int = 0                 # the master's status page port, 0 = off
    mounts: tuple[MountInfo, ...] = ()   # mounts heard from within the session timeout


@dataclass(frozen=True, slots=True)
class Registered:
    cluster_id: str
    epoch: int
    heartbeat_interval_ms: int
    lease_ms: int
    delete_block_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    epoch: int
    reregister: bool
    delete_block_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Usage:
    """A heartbeat's usage numbers."""

    capacity: int = 0
    used: int = 0
    available: int = 0
    blocks: int = 0
    objects: int = 0
    evictions: int = 0
    free_space_ratio: float = 0.0
    reserve_bytes: int = 0
    fs_free_bytes: int = 0
    hits: int = 0
    misses: int = 0
    metrics_port: int = 0


@dataclass(frozen=True, slots=True)
class Inventory:
    """What one worker's full block report (asked for by fsck) found against the metadata."""

    worker_id: str
    reported: int        # blocks it holds
    missing: int         # recorded copies it does not have (dropped from the metadata)
    orphans: int         # blocks it holds that nothing references
    orphans_deleted: bool = False   # they were deleted on it (fsck --repair), else left there


@dataclass(frozen=True, slots=True)
class CorruptCopy:
    block_id: int
    worker_id: str
    path: str            # the file the block belongs to ("" when it has no name)
    reason: str


@dataclass(frozen=True, slots=True)
class ScrubPage:
    """One page of fsck --scrub: the copies of the blocks after `scrub_after` verified on their
    workers; bad ones are already dropped from the metadata. Ask for the next with `next_after`."""

    next_after: int
    done: bool = False
    copies: int = 0                        # verified good
    bytes: int = 0
    skipped: int = 0                       # on workers outside the live set: not checked
    corrupt: tuple[CorruptCopy, ...] = ()  # failed verification (dropped by the worker too)
    missing: tuple[CorruptCopy, ...] = ()  # recorded, but the worker does not have it
    errors: tuple[str, ...] = ()           # copies that could not be checked


@dataclass(frozen=True, slots=True)
class FsckReport:
    """The master's consistency view, and what this call's repair round did."""

    problems: tuple[str, ...] = ()         # metadata inconsistencies (the store's own check)
    replication: Replication = Replication()
    inventories: tuple[Inventory, ...] = ()
    pending: tuple[str, ...] = ()          # workers asked for an inventory that have not sent it
    copied: int = 0
    failed: int = 0
    dropped: int = 0
    unplaceable: int = 0                   # under-replicated, but no live worker can take a copy
    throttled: bool = False                # the round stopped at the repair rate
    errors: tuple[str, ...] = ()
