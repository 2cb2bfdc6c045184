"""The one place that converts protobuf messages (master.proto, common.proto) to and from the
domain values of core/domain.py and core/cluster.py, for every role: the master's service builds
its replies here, the client's MasterClient its requests and the values it returns.

One conversion per reply: the mount's hot paths (lookup, getattr, readdirplus) build one Attr per
inode and nothing else (a frozen dataclass costs about 1-2 us to build), a ReadDir page's only when
an entry's attributes are read (DirEntry.deferred). Replies fill their Attr message in place
(`_fill_attr`) rather than through keyword constructors and a copy into the parent.

Error handling: a request field the master cannot represent (an unknown storage class: proto3
enums are open) raises InvalidArgument; an unknown file type in a reply (a newer master) becomes
FileType.UNSPECIFIED, which the mount shows without type bits, as before.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict

from curvine_py.rpc.jsonmap import with_int64_numbers
from curvine_py.core.cluster import (
    ClusterReport,
    CorruptCopy,
    FsckReport,
    HeartbeatResult,
    Inventory,
    MembershipView,
    MountInfo,
    Registered,
    Replication,
    ScrubPage,
    Usage,
    WorkerInfo,
)
from curvine_py.core.domain import (
    AddedBlock,
    Attr,
    BlockId,
    BlockInfo,
    DirEntry,
    DirLease,
    DirPage,
    FileBlocks,
    FileType,
    InodeId,
    LeaseRenewal,
    NewNode,
    Policy,
    PolicyAt,
    QuotaInfo,
    RenameResult,
    StatFs,
    StorageClass,
    UnlinkResult,
)
from curvine_py.core.errors import CurvineError, InvalidArgument, from_errno
from curvine_py.core.posix import SetAttrChanges
from curvine_py.proto.curvine.v1 import common_pb2 as cpb
from curvine_py.proto.curvine.v1 import master_pb2 as mpb

_FILE_TYPES = tuple(FileType)       # indexed by the wire number: cheaper than FileType(n) per attr
_STORAGE_CLASSES = tuple(StorageClass)
_STORAGE_CLASSES_PB = (cpb.STORAGE_CLASS_UNSPECIFIED, cpb.CACHE, cpb.DURABLE)   # by StorageClass value


# -- namespace ------------------------------------------------------------------------------

def _fill_attr(p: cpb.Attr, a: Attr) -> None:
    """Sets a's fields on the message in place, cheaper than the keyword constructor whose result
    a parent message then copies again (bench/convert_cost.py ab: a 512-entry ReadDir reply 0.41x,
    AttrReplies 0.64x). The fields usually zero are skipped (proto3 sends no zero)."""
    p.ino = a.ino
    p.type = a.type            # type: ignore[assignment]   # an IntEnum of the wire's numbers
    p.mode = a.mode
    p.uid = a.uid
    p.gid = a.gid
    p.size = a.size
    p.nlink = a.nlink
    p.atime_ns = a.atime_ns
    p.mtime_ns = a.mtime_ns
    p.ctime_ns = a.ctime_ns
    if a.rdev:
        p.rdev = a.rdev
    if a.generation:
        p.generation = a.generation
    if a.block_size:
        p.block_size = a.block_size
    if a.stored_bytes:
        p.stored_bytes = a.stored_bytes


def attr_pb(a: Attr) -> cpb.Attr:
    p = cpb.Attr()
    _fill_attr(p, a)
    return p


def attr_from_pb(a: cpb.Attr) -> Attr:
    t = a.type
    kind = _FILE_TYPES[t] if 0 <= t < len(_FILE_TYPES) else FileType.UNSPECIFIED
    return Attr(InodeId(a.ino), kind, a.mode, a.uid, a.gid, a.size, a.nlink, a.atime_ns, a.mtime_ns, a.ctime_ns,
                a.rdev, a.generation, a.block_size, a.stored_bytes)


def attr_reply(a: Attr) -> mpb.AttrReply:
    reply = mpb.AttrReply()
    _fill_attr(reply.attr, a)
    return reply


def storage_class_pb(value: StorageClass) -> cpb.StorageClass:
    """For a protobuf field of common.proto's enum (the data plane's DataHeader)."""
    return _STORAGE_CLASSES_PB[value]


def storage_class_from_pb(value: int) -> StorageClass:
    if 0 <= value < len(_STORAGE_CLASSES):
        return _STORAGE_CLASSES[value]
    raise InvalidArgument(f"unknown storage class {value}")


def policy_pb(p: Policy) -> cpb.Policy:
    return cpb.Policy(storage_class=int(p.storage_class), replicas=p.replicas, ttl_ms=p.ttl_ms,  # type: ignore[arg-type]
                      block_size=p.block_size, placement=p.placement, compress=p.compress)


def policy_from_pb(p: cpb.Policy) -> Policy:
    return Policy(storage_class=storage_class_from_pb(p.storage_class), replicas=p.replicas, ttl_ms=p.ttl_ms,
                  block_size=p.block_size, placement=p.placement, compress=p.compress)


def policy_reply(p: PolicyAt) -> mpb.PolicyReply:
    return mpb.PolicyReply(policy=policy_pb(p.policy), path=p.path)


def policy_at_from_pb(r: mpb.PolicyReply) -> PolicyAt:
    return PolicyAt(policy_from_pb(r.policy), r.path)


def new_node_pb(n: NewNode) -> mpb.CreateRequest:
    return mpb.CreateRequest(parent=n.parent, name=n.name, type=int(n.type), mode=n.mode,  # type: ignore[arg-type]
                             caller=mpb.Caller(uid=n.uid, gid=n.gid), rdev=n.rdev, symlink_target=n.target,
                             exclusive=n.exclusive, truncate=n.truncate)


def new_node_from_pb(r: mpb.CreateRequest) -> NewNode:
    t = r.type
    kind = _FILE_TYPES[t] if 0 <= t < len(_FILE_TYPES) else FileType.UNSPECIFIED
    return NewNode(parent=InodeId(r.parent), name=r.name, type=kind, mode=r.mode, uid=r.caller.uid, gid=r.caller.gid,
                   rdev=r.rdev, target=r.symlink_target, exclusive=r.exclusive, truncate=r.truncate)


def create_result_pb(outcome: Attr | CurvineError) -> mpb.CreateResult:
    """One create of a CreateMany: its attributes, or the error a Create would have raised."""
    if isinstance(outcome, CurvineError):
        return mpb.CreateResult(errno=outcome.errno, error=outcome.message)
    result = mpb.CreateResult()
    _fill_attr(result.attr, outcome)
    return result


def create_result_from_pb(r: mpb.CreateResult) -> Attr | CurvineError:
    return from_errno(r.errno, r.error) if r.errno else attr_from_pb(r.attr)


# SetAttrChanges' optional fields, each a proto3 `optional` of the same name (presence = change it).
_SETATTR_OPTIONAL = ("mode", "uid", "gid", "size", "atime_ns", "mtime_ns", "ctime_ns")


def setattr_pb(ino: InodeId, c: SetAttrChanges) -> mpb.SetAttrRequest:
    """Only the fields to change are set (proto3 `optional`: presence is what the master reads)."""
    return mpb.SetAttrRequest(ino=ino, atime_now=c.atime_now, mtime_now=c.mtime_now,
                              **{name: value for name in _SETATTR_OPTIONAL
                                 if (value := getattr(c, name)) is not None})


def setattr_from_pb(r: mpb.SetAttrRequest) -> SetAttrChanges:
    return SetAttrChanges(atime_now=r.atime_now, mtime_now=r.mtime_now,
                          **{name: int(getattr(r, name)) if r.HasField(name) else None for name in _SETATTR_OPTIONAL})


def unlink_reply(r: UnlinkResult) -> mpb.UnlinkReply:
    return mpb.UnlinkReply(ino=r.ino, nlink=r.nlink)


def unlink_from_pb(r: mpb.UnlinkReply) -> UnlinkResult:
    return UnlinkResult(ino=InodeId(r.ino), nlink=r.nlink)


def rename_reply(r: RenameResult) -> mpb.RenameReply:
    return mpb.RenameReply(replaced_ino=r.replaced_ino, replaced_nlink=r.replaced_nlink)


def rename_from_pb(r: mpb.RenameReply) -> RenameResult:
    return RenameResult(replaced_ino=InodeId(r.replaced_ino), replaced_nlink=r.replaced_nlink)


def readdir_reply(entries: Sequence[DirEntry], more: bool) -> mpb.ReadDirReply:
    reply = mpb.ReadDirReply(more=more)
    add = reply.entries.add
    for e in entries:
        entry = add()
        entry.name = e.name
        _fill_attr(entry.attr, e.attr)
    return reply


def dir_page_from_pb(r: mpb.ReadDirReply, *, eager: bool = False) -> DirPage:
    """By default each entry's Attr is built when first read (DirEntry.deferred): the mount's name
    cache serves few of the names of most pages it fetches. `eager` builds them all now, for a
    caller that reads every entry's attributes (a listing): deferring costs ~1.2x then
    (bench/convert_cost.py, default_all_attrs)."""
    if eager:
        return DirPage(tuple([DirEntry(e.name, attr_from_pb(e.attr)) for e in r.entries]), r.more)
    deferred = DirEntry.deferred
    entries = []
    for e in r.entries:
        pb = e.attr
        entries.append(deferred(e.name, InodeId(pb.ino), attr_from_pb, pb))
    return DirPage(tuple(entries), r.more)


def statfs_pb(s: StatFs) -> mpb.StatFsReply:
    return mpb.StatFsReply(capacity=s.capacity, used=s.used, available=s.available, files=s.files,
                           block_size=s.block_size, max_files=s.max_files)


def statfs_from_pb(r: mpb.StatFsReply) -> StatFs:
    return StatFs(capacity=r.capacity, used=r.used, available=r.available, files=r.files,
                  block_size=r.block_size, max_files=r.max_files)


def quota_pb(q: QuotaInfo) -> mpb.Quota:
    return mpb.Quota(path=q.path, ino=q.ino, max_bytes=q.max_bytes, max_inodes=q.max_inodes,
                     used_bytes=q.used_bytes, used_inodes=q.used_inodes)


def quota_from_pb(q: mpb.Quota) -> QuotaInfo:
    return QuotaInfo(ino=InodeId(q.ino), path=q.path, max_bytes=q.max_bytes, max_inodes=q.max_inodes,
                     used_bytes=q.used_bytes, used_inodes=q.used_inodes)


def dir_lease_reply(names: list[str] | None, term_ms: int) -> mpb.DirLeaseReply:
    """A grant (every name of the directory) or, with None, a refusal."""
    if names is None:
        return mpb.DirLeaseReply(granted=False)
    return mpb.DirLeaseReply(granted=True, term_ms=term_ms, names=names)


def dir_lease_from_pb(r: mpb.DirLeaseReply) -> DirLease:
    return DirLease(granted=r.granted, term_ms=r.term_ms, names=tuple(r.names))


def dir_leases_reply(kept: Sequence[int], term_ms: int, session_timeout_ms: int) -> mpb.DirLeasesReply:
    return mpb.DirLeasesReply(kept=kept, term_ms=term_ms, session_timeout_ms=session_timeout_ms)


def renewal_from_pb(r: mpb.DirLeasesReply) -> LeaseRenewal:
    return LeaseRenewal(kept=tuple([InodeId(ino) for ino in r.kept]), term_ms=r.term_ms, session_timeout_ms=r.session_timeout_ms)


# -- file data ------------------------------------------------------------------------------

def block_pb(b: BlockInfo) -> mpb.BlockInfo:
    return mpb.BlockInfo(index=b.index, block_id=b.block_id, length=b.length, checksum=b.checksum,
                         worker_ids=list(b.worker_ids))


def block_from_pb(b: mpb.BlockInfo) -> BlockInfo:
    return BlockInfo(b.index, BlockId(b.block_id), b.length, b.checksum, tuple(b.worker_ids))


def blocks_reply(fb: FileBlocks) -> mpb.BlocksReply:
    reply = mpb.BlocksReply(blocks=[block_pb(b) for b in fb.blocks], policy=policy_pb(fb.policy))
    _fill_attr(reply.attr, fb.attr)
    return reply


def file_blocks_from_pb(r: mpb.BlocksReply) -> FileBlocks:
    return FileBlocks(attr_from_pb(r.attr), tuple([block_from_pb(b) for b in r.blocks]), policy_from_pb(r.policy))


def added_block_reply(a: AddedBlock) -> mpb.AddBlockReply:
    return mpb.AddBlockReply(block_id=a.block_id, worker_ids=list(a.worker_ids),
                             storage_class=int(a.storage_class),  # type: ignore[arg-type]
                             ttl_ms=a.ttl_ms, block_size=a.block_size)


def added_block_from_pb(r: mpb.AddBlockReply) -> AddedBlock:
    return AddedBlock(block_id=BlockId(r.block_id), worker_ids=tuple(r.worker_ids),
                      storage_class=storage_class_from_pb(r.storage_class), ttl_ms=r.ttl_ms, block_size=r.block_size)


# -- cluster --------------------------------------------------------------------------------

# WorkerInfo's fields are the message's, name for name (test_rpc_convert checks the round trip).
_WORKER_FIELDS = tuple(f.name for f in dataclasses.fields(WorkerInfo))


def worker_pb(w: WorkerInfo) -> mpb.WorkerInfo:
    return mpb.WorkerInfo(**{name: getattr(w, name) for name in _WORKER_FIELDS})


def worker_from_pb(w: mpb.WorkerInfo) -> WorkerInfo:
    return WorkerInfo(**{name: getattr(w, name) for name in _WORKER_FIELDS})


def usage_from_pb(r: mpb.HeartbeatRequest) -> Usage:
    return Usage(capacity=r.capacity, used=r.used, available=r.available, blocks=r.blocks,
                 objects=r.objects, evictions=r.evictions, free_space_ratio=r.free_space_ratio,
                 reserve_bytes=r.reserve_bytes, fs_free_bytes=r.fs_free_bytes, hits=r.hits, misses=r.misses,
                 metrics_port=r.metrics_port)


def registered_reply(r: Registered) -> mpb.RegisterWorkerReply:
    return mpb.RegisterWorkerReply(cluster_id=r.cluster_id, epoch=r.epoch,
                                   heartbeat_interval_ms=r.heartbeat_interval_ms, lease_ms=r.lease_ms,
                                   delete_block_ids=list(r.delete_block_ids))


def heartbeat_reply(h: HeartbeatResult) -> mpb.HeartbeatReply:
    return mpb.HeartbeatReply(epoch=h.epoch, reregister=h.reregister, delete_block_ids=list(h.delete_block_ids))


def membership_pb(v: MembershipView) -> mpb.Membership:
    return mpb.Membership(epoch=v.epoch, workers=[worker_pb(w) for w in v.workers], cluster_id=v.cluster_id)


def membership_from_pb(m: mpb.Membership) -> MembershipView:
    return MembershipView(epoch=m.epoch, workers=tuple(worker_from_pb(w) for w in m.workers), cluster_id=m.cluster_id)


def mount_pb(m: MountInfo) -> mpb.MountInfo:
    return mpb.MountInfo(node=m.node, mountpoint=m.mountpoint, metrics_port=m.metrics_port,
                         last_heartbeat_ms=m.last_heartbeat_ms)


def mount_from_pb(m: mpb.MountInfo) -> MountInfo:
    return MountInfo(node=m.node, mountpoint=m.mountpoint, metrics_port=m.metrics_port,
                     last_heartbeat_ms=m.last_heartbeat_ms)


def replication_pb(r: Replication) -> mpb.Replication:
    return mpb.Replication(under_replicated=r.under_replicated, lost=r.lost, surplus=r.surplus,
                           lost_files=list(r.lost_files), repaired_blocks=r.repaired_blocks,
                           repaired_bytes=r.repaired_bytes, repair_failures=r.repair_failures,
                           repair_rate=r.repair_rate, last_error=r.last_error)


def replication_from_pb(r: mpb.Replication) -> Replication:
    return Replication(under_replicated=r.under_replicated, lost=r.lost, surplus=r.surplus,
                       lost_files=tuple(r.lost_files), repaired_blocks=r.repaired_blocks,
                       repaired_bytes=r.repaired_bytes, repair_failures=r.repair_failures,
                       repair_rate=r.repair_rate, last_error=r.last_error)


def report_pb(r: ClusterReport) -> mpb.ClusterReport:
    return mpb.ClusterReport(cluster_id=r.cluster_id, epoch=r.epoch, workers=[worker_pb(w) for w in r.workers],
                             capacity=r.capacity, used=r.used, available=r.available, files=r.files,
                             directories=r.directories, blocks=r.blocks, dir_leases=r.dir_leases,
                             quotas=[quota_pb(q) for q in r.quotas], replication=replication_pb(r.replication),
                             metrics_port=r.metrics_port, status_port=r.status_port,
                             mounts=[mount_pb(m) for m in r.mounts])


def report_from_pb(r: mpb.ClusterReport) -> ClusterReport:
    return ClusterReport(cluster_id=r.cluster_id, epoch=r.epoch, workers=tuple(worker_from_pb(w) for w in r.workers),
                         capacity=r.capacity, used=r.used, available=r.available, files=r.files,
                         directories=r.directories, blocks=r.blocks, dir_leases=r.dir_leases,
                         quotas=tuple(quota_from_pb(q) for q in r.quotas),
                         replication=replication_from_pb(r.replication), metrics_port=r.metrics_port,
                         status_port=r.status_port, mounts=tuple(mount_from_pb(m) for m in r.mounts))


def report_as_dict(r: ClusterReport) -> dict[str, Any]:
    """The report in protobuf's JSON mapping, every field present (`report --json`: a public
    format, so it stays the wire message's camelCase names), 64-bit integers as numbers."""
    message = report_pb(r)
    return with_int64_numbers(message.DESCRIPTOR, MessageToDict(message, always_print_fields_with_no_presence=True))


def inventory_pb(i: Inventory) -> mpb.WorkerInventory:
    return mpb.WorkerInventory(worker_id=i.worker_id, reported=i.reported, missing=i.missing, orphans=i.orphans,
                               orphans_deleted=i.orphans_deleted)


def inventory_from_pb(i: mpb.WorkerInventory) -> Inventory:
    return Inventory(worker_id=i.worker_id, reported=i.reported, missing=i.missing, orphans=i.orphans,
                     orphans_deleted=i.orphans_deleted)


def fsck_reply(f: FsckReport) -> mpb.FsckReply:
    return mpb.FsckReply(problems=list(f.problems), replication=replication_pb(f.replication),
                         inventories=[inventory_pb(i) for i in f.inventories], pending=list(f.pending),
                         copied=f.copied, failed=f.failed, dropped=f.dropped, unplaceable=f.unplaceable,
                         throttled=f.throttled, errors=list(f.errors))


def fsck_from_pb(r: mpb.FsckReply) -> FsckReport:
    return FsckReport(problems=tuple(r.problems), replication=replication_from_pb(r.replication),
                      inventories=tuple(inventory_from_pb(i) for i in r.inventories), pending=tuple(r.pending),
                      copied=r.copied, failed=r.failed, dropped=r.dropped, unplaceable=r.unplaceable,
                      throttled=r.throttled, errors=tuple(r.errors))


def fsck_as_dict(f: FsckReport) -> dict[str, Any]:
    """fsck's findings in protobuf's JSON mapping (`fsck --json`: a public format)."""
    return MessageToDict(fsck_reply(f), always_print_fields_with_no_presence=True)


def inventory_as_dict(i: Inventory) -> dict[str, Any]:
    return MessageToDict(inventory_pb(i), always_print_fields_with_no_presence=True)


def _copy_pb(c: CorruptCopy) -> mpb.CorruptCopy:
    return mpb.CorruptCopy(block_id=c.block_id, worker_id=c.worker_id, path=c.path, reason=c.reason)


def _copy_from_pb(c: mpb.CorruptCopy) -> CorruptCopy:
    return CorruptCopy(block_id=c.block_id, worker_id=c.worker_id, path=c.path, reason=c.reason)


def scrub_page_pb(p: ScrubPage) -> mpb.ScrubPage:
    return mpb.ScrubPage(next_after=p.next_after, done=p.done, copies=p.copies, bytes=p.bytes, skipped=p.skipped,
                         corrupt=[_copy_pb(c) for c in p.corrupt], missing=[_copy_pb(c) for c in p.missing],
                         errors=list(p.errors))


def scrub_page_from_pb(p: mpb.ScrubPage) -> ScrubPage:
    return ScrubPage(next_after=p.next_after, done=p.done, copies=p.copies, bytes=p.bytes, skipped=p.skipped,
                     corrupt=tuple(_copy_from_pb(c) for c in p.corrupt),
                     missing=tuple(_copy_from_pb(c) for c in p.missing), errors=tuple(p.errors))
