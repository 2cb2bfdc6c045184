"""The master's own values (namespace counts, eviction and repair outcomes), and the shared
domain values of core/ re-exported for the master's modules (one definition, in core)."""
from __future__ import annotations

from dataclasses import dataclass, field

# Re-exported for the master's modules: one definition, in core.
from curvine_py.core.cluster import ClusterReport as ClusterReport  # noqa: PLC0414 - explicit re-export
from curvine_py.core.cluster import HeartbeatResult as HeartbeatResult  # noqa: PLC0414 - explicit re-export
from curvine_py.core.cluster import Inventory as Inventory  # noqa: PLC0414 - explicit re-export
from curvine_py.core.cluster import MembershipView as MembershipView  # noqa: PLC0414 - explicit re-export
from curvine_py.core.cluster import Registered as Registered  # noqa: PLC0414 - explicit re-export
from curvine_py.core.cluster import Usage as Usage  # noqa: PLC0414 - explicit re-export
from curvine_py.core.cluster import WorkerInfo as WorkerInfo  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import PLACEMENT_HASH as PLACEMENT_HASH  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import PLACEMENT_LOCAL as PLACEMENT_LOCAL  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import XATTR_CREATE as XATTR_CREATE  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import XATTR_REPLACE as XATTR_REPLACE  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import AddedBlock as AddedBlock  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import Attr as Attr  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import BlockInfo as BlockInfo  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import DirEntry as DirEntry  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import FileBlocks as FileBlocks  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import FileType as FileType  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import Policy as Policy  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import PolicyAt as PolicyAt  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import QuotaInfo as QuotaInfo  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import RenameResult as RenameResult  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import StatFs as StatFs  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import StorageClass as StorageClass  # noqa: PLC0414 - explicit re-export
from curvine_py.core.domain import UnlinkResult as UnlinkResult  # noqa: PLC0414 - explicit re-export
from curvine_py.core.posix import RENAME_EXCHANGE as RENAME_EXCHANGE  # noqa: PLC0414 - explicit re-export
from curvine_py.core.posix import RENAME_NOREPLACE as RENAME_NOREPLACE  # noqa: PLC0414 - explicit re-export
from curvine_py.core.posix import ROOT_INO as ROOT_INO  # noqa: PLC0414 - explicit re-export
from curvine_py.core.posix import SetAttrChanges as SetAttrChanges  # noqa: PLC0414 - explicit re-export


@dataclass(frozen=True, slots=True)
class NamespaceCounts:
    files: int
    directories: int
    blocks: int
    inodes: int


@dataclass(frozen=True, slots=True)
class Evicted:
    """What a heartbeat's evicted/bad block lists did to the namespace (for logs and tests)."""

    locations_removed: int = 0
    unlinked_inos: tuple[int, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class RepairStats:
    """What re-replication did since the master started (master/repair.py)."""

    rate: int = 0                # bytes/s, 0 = off
    copied_blocks: int = 0
    copied_bytes: int = 0
    failed_copies: int = 0
    dropped_surplus: int = 0
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class RoundResult:
    """One repair round."""

    copied: int = 0
    failed: int = 0
    dropped: int = 0
    throttled: bool = False      # stopped early: the byte allowance ran out
    unplaceable: int = 0         # under-replicated blocks with no live worker left to take a copy
    errors: tuple[str, ...] = field(default=())
