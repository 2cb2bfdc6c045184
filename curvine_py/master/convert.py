"""The one place that converts the master's domain values to and from protobuf messages."""
from __future__ import annotations

from collections.abc import Callable

from curvine_py.core.errors import CurvineError, InvalidArgument
from curvine_py.master.scrub import BadCopy, ScrubbedPage
from curvine_py.master.sessions import LiveMount, MountRecord
from curvine_py.master.store.replication import ReplicationState
from curvine_py.master.types import (
    AddedBlock,
    Attr,
    BlockInfo,
    ClusterReport,
    DirEntry,
    HeartbeatResult,
    Inventory,
    MembershipView,
    Policy,
    PolicyAt,
    QuotaInfo,
    Registered,
    RenameResult,
    RepairStats,
    RoundResult,
    SetAttrChanges,
    StatFs,
    StorageClass,
    UnlinkResult,
    Usage,
    WorkerInfo,
)
from curvine_py.proto.curvine.v1 import common_pb2 as cpb
from curvine_py.proto.curvine.v1 import master_pb2 as mpb


def attr_pb(a: Attr) -> cpb.Attr:
    return cpb.Attr(ino=a.ino, type=int(a.type), mode=a.mode, uid=a.uid, gid=a.gid, size=a.size,  # type: ignore[arg-type]
                    nlink=a.nlink, atime_ns=a.atime_ns, mtime_ns=a.mtime_ns, ctime_ns=a.ctime_ns,
                    rdev=a.rdev, generation=a.generation, block_size=a.block_size, stored_bytes=a.stored_bytes)


def policy_pb(p: Policy) -> cpb.Policy:
    return cpb.Policy(storage_class=int(p.storage_class), replicas=p.replicas, ttl_ms=p.ttl_ms,  # type: ignore[arg-type]
                      block_size=p.block_size, placement=p.placement, compress=p.compress)


def policy_from_pb(p: cpb.Policy) -> Policy:
    try:
        storage_class = StorageClass(p.storage_class)
    except ValueError:   # proto3 enums are open: any number can arrive
        raise InvalidArgument(f"unknown storage class {p.storage_class}") from None
    return Policy(storage_class=storage_class, replicas=p.replicas, ttl_ms=p.ttl_ms,
                  block_size=p.block_size, placement=p.placement, compress=p.compress)


def policy_reply(p: PolicyAt) -> mpb.PolicyReply:
    return mpb.PolicyReply(policy=policy_pb(p.policy), path=p.path)


def block_pb(b: BlockInfo) -> mpb.BlockInfo:
    return mpb.BlockInfo(index=b.index, block_id=b.block_id, length=b.length, checksum=b.checksum,
                         worker_ids=list(b.worker_ids))


def block_from_pb(b: mpb.BlockInfo) -> BlockInfo:
    return BlockInfo(index=b.index, block_id=b.block_id, length=b.length, checksum=b.checksum,
                     worker_ids=tuple(b.worker_ids))


def worker_pb(w: WorkerInfo) -> mpb.WorkerInfo:
    return mpb.WorkerInfo(worker_id=w.worker_id, host=w.host, port=w.port, unix_socket=w.unix_socket,
                          node=w.node, capacity=w.capacity, used=w.used, available=w.available,
                          lm_port=w.lm_port, live=w.live, last_heartbeat_ms=w.last_heartbeat_ms,
                          blocks=w.blocks, objects=w.objects, evictions=w.evictions,
                          free_space_ratio=w.free_space_ratio, reserve_bytes=w.reserve_bytes,
                          fs_free_bytes=w.fs_free_bytes, hits=w.hits, misses=w.misses,
                          metrics_port=w.metrics_port)


def worker_from_pb(w: mpb.WorkerInfo) -> WorkerInfo:
    return WorkerInfo(worker_id=w.worker_id, host=w.host, port=w.port, unix_socket=w.unix_socket,
                      node=w.node, capacity=w.capacity, used=w.used, available=w.available,
                      lm_port=w.lm_port, live=w.live, last_heartbeat_ms=w.last_heartbeat_ms,
                      blocks=w.blocks, objects=w.objects, evictions=w.evictions,
                      free_space_ratio=w.free_space_ratio, reserve_bytes=w.reserve_bytes,
                      fs_free_bytes=w.fs_free_bytes, hits=w.hits, misses=w.misses,
                      metrics_port=w.metrics_port)


def usage_from_pb(r: mpb.HeartbeatRequest) -> Usage:
    return Usage(capacity=r.capacity, used=r.used, available=r.available, blocks=r.blocks,
                 objects=r.objects, evictions=r.evictions, free_space_ratio=r.free_space_ratio,
                 reserve_bytes=r.reserve_bytes, fs_free_bytes=r.fs_free_bytes, hits=r.hits, misses=r.misses,
                 metrics_port=r.metrics_port)


def setattr_from_pb(r: mpb.SetAttrRequest) -> SetAttrChanges:
    def opt(field: str) -> int | None:
        return int(getattr(r, field)) if r.HasField(field) else None

    return SetAttrChanges(mode=opt("mode"), uid=opt("uid"), gid=opt("gid"), size=opt("size"),
                          atime_ns=opt("atime_ns"), mtime_ns=opt("mtime_ns"), atime_now=r.atime_now,
                          mtime_now=r.mtime_now, ctime_ns=opt("ctime_ns"))


def membership_pb(v: MembershipView) -> mpb.Membership:
    return mpb.Membership(epoch=v.epoch, workers=[worker_pb(w) for w in v.workers], cluster_id=v.cluster_id)


def report_pb(r: ClusterReport) -> mpb.ClusterReport:
    return mpb.ClusterReport(cluster_id=r.cluster_id, epoch=r.epoch, workers=[worker_pb(w) for w in r.workers],
                             capacity=r.capacity, used=r.used, available=r.available, files=r.files,
                             directories=r.directories, blocks=r.blocks)


def mount_from_pb(m: mpb.MountInfo) -> MountRecord:
    return MountRecord(node=m.node, mountpoint=m.mountpoint, metrics_port=m.metrics_port)


def mounts_pb(mounts: list[LiveMount], wall_ms: int) -> list[mpb.MountInfo]:
    """For the report: each heartbeat's age turned into its wall-clock time (as WorkerInfo's)."""
    return [mpb.MountInfo(node=m.mount.node, mountpoint=m.mount.mountpoint, metrics_port=m.mount.metrics_port,
                          last_heartbeat_ms=wall_ms - int(m.age_s * 1000)) for m in mounts]


def statfs_pb(s: StatFs) -> mpb.StatFsReply:
    return mpb.StatFsReply(capacity=s.capacity, used=s.used, available=s.available, files=s.files,
                           block_size=s.block_size, max_files=s.max_files)


def quota_pb(q: QuotaInfo) -> mpb.Quota:
    return mpb.Quota(path=q.path, ino=q.ino, max_bytes=q.max_bytes, max_inodes=q.max_inodes,
                     used_bytes=q.used_bytes, used_inodes=q.used_inodes)


def attr_reply(a: Attr) -> mpb.AttrReply:
    return mpb.AttrReply(attr=attr_pb(a))


def create_result_pb(outcome: Attr | CurvineError) -> mpb.CreateResult:
    """One create of a CreateMany: its attributes, or the error a Create would have raised."""
    if isinstance(outcome, CurvineError):
        return mpb.CreateResult(errno=outcome.errno, error=outcome.message)
    return mpb.CreateResult(attr=attr_pb(outcome))


def unlink_reply(r: UnlinkResult) -> mpb.UnlinkReply:
    return mpb.UnlinkReply(ino=r.ino, nlink=r.nlink)


def rename_reply(r: RenameResult) -> mpb.RenameReply:
    return mpb.RenameReply(replaced_ino=r.replaced_ino, replaced_nlink=r.replaced_nlink)


def readdir_reply(entries: list[DirEntry], more: bool) -> mpb.ReadDirReply:
    return mpb.ReadDirReply(entries=[mpb.DirEntry(name=e.name, attr=attr_pb(e.attr)) for e in entries], more=more)


def added_block_reply(a: AddedBlock) -> mpb.AddBlockReply:
    return mpb.AddBlockReply(block_id=a.block_id, worker_ids=list(a.worker_ids),
                             storage_class=int(a.storage_class),  # type: ignore[arg-type]
                             ttl_ms=a.ttl_ms, block_size=a.block_size)


def registered_reply(r: Registered) -> mpb.RegisterWorkerReply:
    return mpb.RegisterWorkerReply(cluster_id=r.cluster_id, epoch=r.epoch,
                                   heartbeat_interval_ms=r.heartbeat_interval_ms, lease_ms=r.lease_ms,
                                   delete_block_ids=list(r.delete_block_ids))


def heartbeat_reply(h: HeartbeatResult) -> mpb.HeartbeatReply:
    return mpb.HeartbeatReply(epoch=h.epoch, reregister=h.reregister, delete_block_ids=list(h.delete_block_ids))


def dir_lease_reply(names: list[str] | None, term_ms: int) -> mpb.DirLeaseReply:
    """A grant (every name of the directory) or, with None, a refusal."""
    if names is None:
        return mpb.DirLeaseReply(granted=False)
    return mpb.DirLeaseReply(granted=True, term_ms=term_ms, names=names)


def dir_leases_reply(kept: list[int], term_ms: int, session_timeout_ms: int) -> mpb.DirLeasesReply:
    return mpb.DirLeasesReply(kept=kept, term_ms=term_ms, session_timeout_ms=session_timeout_ms)


def blocks_reply(attr: Attr, blocks: tuple[BlockInfo, ...], policy: Policy) -> mpb.BlocksReply:
    return mpb.BlocksReply(attr=attr_pb(attr), blocks=[block_pb(b) for b in blocks], policy=policy_pb(policy))


def replication_pb(state: ReplicationState, stats: RepairStats) -> mpb.Replication:
    return mpb.Replication(under_replicated=len(state.under), lost=len(state.lost), surplus=len(state.surplus),
                           lost_files=list(state.lost_files), repaired_blocks=stats.copied_blocks,
                           repaired_bytes=stats.copied_bytes, repair_failures=stats.failed_copies,
                           repair_rate=stats.rate, last_error=stats.last_error)


def inventory_pb(i: Inventory) -> mpb.WorkerInventory:
    return mpb.WorkerInventory(worker_id=i.worker_id, reported=i.reported, missing=i.missing, orphans=i.orphans,
                               orphans_deleted=i.orphans_deleted)


def fsck_reply(problems: list[str], replication: mpb.Replication, inventories: list[Inventory],
               pending: list[str], repaired: RoundResult) -> mpb.FsckReply:
    return mpb.FsckReply(problems=problems, replication=replication,
                         inventories=[inventory_pb(i) for i in inventories], pending=pending,
                         copied=repaired.copied, failed=repaired.failed, dropped=repaired.dropped,
                         unplaceable=repaired.unplaceable, throttled=repaired.throttled,
                         errors=list(repaired.errors))


def scrub_page_pb(page: ScrubbedPage, path_of: Callable[[int], str]) -> mpb.ScrubPage:
    def bad(c: BadCopy) -> mpb.CorruptCopy:
        return mpb.CorruptCopy(block_id=c.block_id, worker_id=c.worker_id, path=path_of(c.ino), reason=c.reason)
    return mpb.ScrubPage(next_after=page.next_after, done=page.done, copies=page.copies, bytes=page.bytes,
                         skipped=page.skipped,
                         corrupt=[bad(c) for c in page.corrupt], missing=[bad(c) for c in page.missing],
                         errors=page.errors)
