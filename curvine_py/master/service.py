"""The Master gRPC service (a synchronous grpc.server with a thread pool): thin handlers that
run the store and convert. Synchronous rather than grpc.aio: it costs the server less CPU per
unary call; `bench meta` measured fsync'd creates at 500-570/s on grpc.aio and 810-900/s on this
server (1 client thread, same machine).

Every handler is wrapped by `grpc_method`, so a CurvineError becomes its gRPC status plus the
`curvine-errno` trailer. Every write goes through the StoreThread: one thread owns the writing
SQLite connection, and a reply is only released after the batch it ran in was committed. Pure
namespace reads (lookup, getattr, path resolution, readdir, readlink, xattrs, a file's blocks) run in the handler
thread on its own read-only connection: they see committed state only, so they can never reveal a write that was
not yet acknowledged, and they do not wait behind a batch's fsync.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeAlias, TypeVar

import grpc

from curvine_py.core.cluster import FsckReport, Replication, ScrubPage
from curvine_py.core.errors import CurvineError, InvalidArgument, NotSupported
from curvine_py.master import scrub
from curvine_py.master.leases import DirLeases, LeaseBusy
from curvine_py.master.membership import Membership
from curvine_py.master.namespace import Namespace
from curvine_py.master.repair import Repairer
from curvine_py.master.sessions import Sessions, check_mount
from curvine_py.master.store.quotas import quota_statfs
from curvine_py.master.storethread import StoreThread
from curvine_py.master.types import (
    AddedBlock,
    Attr,
    RenameResult,
    RepairStats,
    RoundResult,
    StatFs,
    UnlinkResult,
)
from curvine_py.proto.curvine.v1 import master_pb2 as mpb
from curvine_py.proto.curvine.v1 import master_pb2_grpc
from curvine_py.rpc import convert
from curvine_py.rpc.auth import TokenInterceptor, session_of
from curvine_py.rpc.errors import grpc_method
from curvine_py.rpc.tls import TlsFiles, server_credentials

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_MESSAGE = 64 << 20
OPEN_BLOCK_MAX_AGE_MS = 24 * 3600 * 1000   # a block allocated and never committed for a day is given up
OPEN_BLOCK_SWEEP_S = 600.0
ORPHAN_SWEEP_S = 1.0          # files past their unlink grace are freed this often
DEFAULT_SESSION_TIMEOUT_S = 30.0
# Concurrent RPCs being handled; more wait in gRPC's queue. Reads run in these threads, writes
# wait in them for their group commit, so this bounds a commit batch too.
HANDLER_THREADS = 32
MAX_LEASE_NAMES = 16_384    # bigger directories are not leased (the grant lists every name)
MAX_CREATE_MANY = 256       # creates in one CreateMany call

Ctx: TypeAlias = grpc.ServicerContext


class MasterService(master_pb2_grpc.MasterServicer):
    def __init__(self, ns: Namespace, membership: Membership, store: StoreThread,
                 leases: DirLeases | None = None, sessions: Sessions | None = None, *,
                 repairer: Repairer | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._ns = ns
        self._clock = clock             # seconds, for the maintenance schedule (tests pass a fake one)
        self._repairer = repairer       # None: no re-replication (--repair-rate 0)
        self._mem = membership
        self._store = store
        self._leases = leases or DirLeases(0.0)
        self._sessions = sessions or Sessions(DEFAULT_SESSION_TIMEOUT_S)
        self._leases_marked = False     # store thread only: the durable "leases were granted" marker
        # Pure reads run in the handler thread on that thread's own read-only connection, on
        # committed state: no queueing behind writes and fsyncs, no hop to the store thread.
        self._local = threading.local()
        self._readers: list[Namespace] = []
        self._readers_lock = threading.Lock()
        # maintenance schedule (maintain_step)
        self._next_open_block_sweep = clock() + OPEN_BLOCK_SWEEP_S
        self._next_orphan_sweep = 0.0
        self._marker_checked = False
        # The master's own observability ports, for Report (set once they are bound; 0 = off).
        self.metrics_port = 0
        self.status_port = 0

    def close(self) -> None:
        with self._readers_lock:
            for reader in self._readers:
                reader.close()
            self._readers.clear()

    def _read(self, method: Callable[..., T], *args: Any) -> T:
        """Namespace.method(reader, *args) on this thread's reader, as one consistent snapshot."""
        reader: Namespace | None = getattr(self._local, "reader", None)
        if reader is None:
            reader = self._local.reader = self._ns.reader()
            with self._readers_lock:
                self._readers.append(reader)
        with reader.snapshot():
            return method(reader, *args)

    def _adding_names(self, context: Ctx, directories: tuple[int, ...], fn: Callable[[], T]) -> T:
        """fn() (a store call that adds a name to each of `directories`) once no other session
        holds a lease on them: recalls and waits first, then re-checks on the store thread."""
        if not self._leases.enabled:
            return self._store.call(fn)
        session = session_of(context)
        deadline = self._leases.now() + 2 * self._leases.term_s + 1.0

        def checked() -> T:
            for directory in directories:
                self._leases.check(directory, session)
            return fn()

        while True:
            for directory in directories:
                self._leases.recall_and_wait(directory, session, deadline)
            try:
                return self._store.call(checked)
            except LeaseBusy:
                continue     # granted while we waited: recall that one too

    def _keeper(self, keep_orphan: bool, context: Ctx) -> str:
        """The session that will keep an orphan (and is alive right now), or "" when none is kept."""
        if not keep_orphan:
            return ""
        session = session_of(context)
        self._sessions.seen(session)
        return session

    # ------------------------------------------------------------------ composite store calls
    # (each runs entirely on the store thread)

    def _add_block(self, ino: int, index: int, client_node: str) -> AddedBlock:
        self._mem.expire()
        return self._ns.add_block(ino, index, client_node, self._mem.live_workers())

    def _statfs(self, inodes: int) -> StatFs:
        return self._ns.statfs(self._mem.live_workers(), inodes)

    # ------------------------------------------------------------------ namespace

    @grpc_method
    def Lookup(self, request: mpb.LookupRequest, context: Ctx) -> mpb.AttrReply:
        attr = self._read(Namespace.lookup, request.parent, request.name)
        return convert.attr_reply(attr)

    @grpc_method
    def GetAttr(self, request: mpb.InodeRequest, context: Ctx) -> mpb.AttrReply:
        attr = self._read(Namespace.getattr, request.ino)
        return convert.attr_reply(attr)

    @grpc_method
    def ResolvePath(self, request: mpb.PathRequest, context: Ctx) -> mpb.AttrReply:
        attr = self._read(Namespace.resolve_path, request.path, request.follow_symlinks)
        return convert.attr_reply(attr)

    @grpc_method
    def SetAttr(self, request: mpb.SetAttrRequest, context: Ctx) -> mpb.AttrReply:
        attr = self._store.call(self._ns.setattr, request.ino, convert.setattr_from_pb(request))
        return convert.attr_reply(attr)

    def _create(self, request: mpb.CreateRequest) -> Attr:
        return self._ns.create(
            request.parent, request.name, request.type, request.mode, uid=request.caller.uid, gid=request.caller.gid,
            rdev=request.rdev, symlink_target=request.symlink_target, exclusive=request.exclusive,
            truncate=request.truncate)

    @grpc_method
    def Create(self, request: mpb.CreateRequest, context: Ctx) -> mpb.AttrReply:
        attr = self._adding_names(context, (request.parent,), lambda: self._create(request))
        return convert.attr_reply(attr)

    @grpc_method
    def CreateMany(self, request: mpb.CreateManyRequest, context: Ctx) -> mpb.CreateManyReply:
        if len(request.creates) > MAX_CREATE_MANY:
            raise InvalidArgument(f"{len(request.creates)} creates in one call (at most {MAX_CREATE_MANY})")

        def create_all() -> list[Attr | CurvineError]:
            results: list[Attr | CurvineError] = []
            # All or nothing on an unexpected error (the caller is told the whole call failed);
            # a CurvineError is one create's answer and rolls back only its own savepoint.
            with self._ns.transaction():
                for create in request.creates:
                    try:
                        results.append(self._create(create))
                    except CurvineError as exc:
                        results.append(exc)
            return results

        parents = tuple(dict.fromkeys(create.parent for create in request.creates))
        outcomes = self._adding_names(context, parents, create_all)
        return mpb.CreateManyReply(results=[convert.create_result_pb(o) for o in outcomes])

    @grpc_method
    def Link(self, request: mpb.LinkRequest, context: Ctx) -> mpb.AttrReply:
        def link() -> Attr:
            return self._ns.link(request.ino, request.new_parent, request.new_name)

        attr = self._adding_names(context, (request.new_parent,), link)
        return convert.attr_reply(attr)

    @grpc_method
    def Unlink(self, request: mpb.UnlinkRequest, context: Ctx) -> mpb.UnlinkReply:
        keeper = self._keeper(request.keep_orphan, context)

        def unlink() -> UnlinkResult:
            return self._ns.unlink(request.parent, request.name, directory=request.directory,
                                   keep_orphan=request.keep_orphan, keeper=keeper)

        return convert.unlink_reply(self._store.call(unlink))

    @grpc_method
    def Rename(self, request: mpb.RenameRequest, context: Ctx) -> mpb.RenameReply:
        keeper = self._keeper(request.keep_orphan, context)

        def rename() -> RenameResult:
            return self._ns.rename(request.parent, request.name, request.new_parent, request.new_name,
                                   request.flags, request.keep_orphan, keeper)

        return convert.rename_reply(self._adding_names(context, (request.new_parent,), rename))

    @grpc_method
    def ReadDir(self, request: mpb.ReadDirRequest, context: Ctx) -> mpb.ReadDirReply:
        entries, more = self._read(Namespace.readdir, request.ino, request.after_name, request.limit)
        return convert.readdir_reply(entries, more)

    @grpc_method
    def ReadLink(self, request: mpb.InodeRequest, context: Ctx) -> mpb.ReadLinkReply:
        return mpb.ReadLinkReply(target=self._read(Namespace.readlink, request.ino))

    @grpc_method
    def GetXattr(self, request: mpb.XattrRequest, context: Ctx) -> mpb.XattrReply:
        return mpb.XattrReply(value=self._read(Namespace.getxattr, request.ino, request.name))

    @grpc_method
    def SetXattr(self, request: mpb.XattrRequest, context: Ctx) -> mpb.Empty:
        self._store.call(self._ns.setxattr, request.ino, request.name, request.value, request.flags)
        return mpb.Empty()

    @grpc_method
    def ListXattr(self, request: mpb.XattrRequest, context: Ctx) -> mpb.XattrReply:
        return mpb.XattrReply(names=self._read(Namespace.listxattr, request.ino))

    @grpc_method
    def RemoveXattr(self, request: mpb.XattrRequest, context: Ctx) -> mpb.Empty:
        self._store.call(self._ns.removexattr, request.ino, request.name)
        return mpb.Empty()

    @grpc_method
    def StatFs(self, request: mpb.StatFsRequest, context: Ctx) -> mpb.StatFsReply:
        quota = self._read(Namespace.nearest_quota, request.ino) if request.ino else None
        s = self._store.call(self._statfs, self._read(Namespace.inode_count))   # counted off the store thread
        return convert.statfs_pb(quota_statfs(s, quota))

    @grpc_method
    def ReleaseOrphan(self, request: mpb.InodeRequest, context: Ctx) -> mpb.Empty:
        self._store.call(self._ns.release_orphan, request.ino)
        return mpb.Empty()

    # ------------------------------------------------------------------ directory leases

    @grpc_method
    def AcquireDirLease(self, request: mpb.InodeRequest, context: Ctx) -> mpb.DirLeaseReply:
        session = session_of(context)
        if not self._leases.enabled or not session:
            return mpb.DirLeaseReply(granted=False)

        def grant() -> list[str] | None:
            if not self._leases.may_grant(request.ino, session):
                return None
            names = self._ns.names(request.ino, MAX_LEASE_NAMES)
            if names is None:
                return None
            if not self._leases_marked:      # durable before any holder uses a lease (restart grace)
                self._ns.set_lease_marker(self._term_ms())
                self._leases_marked = True
            self._leases.grant(request.ino, session)
            return names

        return convert.dir_lease_reply(self._store.call(grant), self._term_ms())

    @grpc_method
    def RenewDirLeases(self, request: mpb.DirLeasesRequest, context: Ctx) -> mpb.DirLeasesReply:
        session = session_of(context)
        mount = check_mount(convert.mount_from_pb(request.mount)) if request.HasField("mount") else None
        self._sessions.seen(session, mount)      # also the session's heartbeat
        kept = self._leases.renew(session, list(request.dirs))
        return convert.dir_leases_reply(kept, self._term_ms(), int(self._sessions.timeout_s * 1000))

    @grpc_method
    def ReleaseDirLeases(self, request: mpb.DirLeasesRequest, context: Ctx) -> mpb.Empty:
        self._leases.release(session_of(context), list(request.dirs))
        return mpb.Empty()

    def _release_orphans_of_dead_sessions(self) -> None:
        if not self._sessions.can_judge():
            return
        for ino, session in self._read(Namespace.kept_orphans):
            if self._sessions.dead(session):
                log.info("session %s is gone: releasing orphan inode %d it kept", session, ino)
                self._store.call(self._ns.release_orphan, ino)

    def _clear_lease_marker(self) -> None:
        """Store thread, once the predecessor's leases have run out: a later restart needs no grace
        unless this master grants leases itself."""
        if not self._leases_marked and self._ns.lease_marker():
            self._ns.set_lease_marker(0)

    def _term_ms(self) -> int:
        return int(self._leases.term_s * 1000)

    # ------------------------------------------------------------------ file data

    @grpc_method
    def GetBlocks(self, request: mpb.InodeRequest, context: Ctx) -> mpb.BlocksReply:
        # A pure read (every open asks): committed state on this thread's reader, as Lookup; the
        # store thread's hand-off and its empty transaction cost more than the read (issue 14).
        fb = self._read(Namespace.get_blocks, request.ino)
        # Copies on every registered worker, live ones first: a worker just past its lease may
        # only be late with its heartbeats, and its copy may be the only one.
        copies = self._mem.copies
        return convert.blocks_reply(replace(fb, blocks=tuple(replace(b, worker_ids=copies(b.worker_ids))
                                                               for b in fb.blocks)))

    @grpc_method
    def AddBlock(self, request: mpb.AddBlockRequest, context: Ctx) -> mpb.AddBlockReply:
        return convert.added_block_reply(self._store.call(self._add_block, request.ino, request.index,
                                                          request.client_node))

    @grpc_method
    def CommitFile(self, request: mpb.CommitFileRequest, context: Ctx) -> mpb.AttrReply:
        blocks = [convert.block_from_pb(b) for b in request.blocks]
        attr = self._store.call(self._ns.commit_file, request.ino, request.size, blocks, request.set_mtime)
        return convert.attr_reply(attr)

    @grpc_method
    def AbandonBlocks(self, request: mpb.AbandonBlocksRequest, context: Ctx) -> mpb.Empty:
        self._store.call(self._ns.abandon_blocks, request.ino, list(request.block_ids))
        return mpb.Empty()

    # ------------------------------------------------------------------ policy

    @grpc_method
    def SetPolicy(self, request: mpb.SetPolicyRequest, context: Ctx) -> mpb.PolicyReply:
        policy = convert.policy_from_pb(request.policy)
        return convert.policy_reply(self._store.call(self._ns.set_policy, request.path, policy))

    @grpc_method
    def GetPolicy(self, request: mpb.PathRequest, context: Ctx) -> mpb.PolicyReply:
        return convert.policy_reply(self._store.call(self._ns.get_policy, request.path))

    # ------------------------------------------------------------------ quotas

    @grpc_method
    def SetQuota(self, request: mpb.SetQuotaRequest, context: Ctx) -> mpb.Quota:
        return convert.quota_pb(self._store.call(self._ns.set_quota, request.path, request.max_bytes,
                                                 request.max_inodes))

    @grpc_method
    def GetQuota(self, request: mpb.PathRequest, context: Ctx) -> mpb.Quota:
        return convert.quota_pb(self._read(Namespace.get_quota, request.path))

    # ------------------------------------------------------------------ cluster

    @grpc_method
    def RegisterWorker(self, request: mpb.RegisterWorkerRequest,
                             context: Ctx) -> mpb.RegisterWorkerReply:
        info = convert.worker_from_pb(request.info)
        return convert.registered_reply(self._store.call(self._mem.register, info, list(request.block_ids)))

    @grpc_method
    def Heartbeat(self, request: mpb.HeartbeatRequest, context: Ctx) -> mpb.HeartbeatReply:
        return convert.heartbeat_reply(self._store.call(
            self._mem.heartbeat, request.worker_id, convert.usage_from_pb(request),
            list(request.evicted_block_ids), list(request.bad_block_ids)))

    @grpc_method
    def GetMembership(self, request: mpb.Empty, context: Ctx) -> mpb.Membership:
        return convert.membership_pb(self._store.call(self._mem.view))

    @grpc_method
    def Report(self, request: mpb.Empty, context: Ctx) -> mpb.ClusterReport:
        counts = self._read(Namespace.counts)     # a full scan: on this thread's reader, not the store's
        wall_ms = int(time.time() * 1000)
        # Each mount's heartbeat age turned into its wall-clock time (as WorkerInfo's).
        mounts = tuple(replace(m.mount, last_heartbeat_ms=wall_ms - int(m.age_s * 1000)) for m in self._sessions.mounts())
        report = replace(self._store.call(self._mem.report, counts), dir_leases=self._leases.held(),
                         quotas=tuple(self._read(Namespace.list_quotas)), replication=self._replication(),
                         metrics_port=self.metrics_port, status_port=self.status_port, mounts=mounts)
        return convert.report_pb(report)

    def _replication(self) -> Replication:
        state = self._repairer.cached_state() if self._repairer else None
        if state is None:
            live = self._store.call(self._mem.live_ids)
            state = self._read(Namespace.replication_state, live)    # a full pass: on this thread's reader
        stats = self._repairer.stats() if self._repairer else RepairStats()
        return Replication(under_replicated=len(state.under), lost=len(state.lost), surplus=len(state.surplus),
                           lost_files=tuple(state.lost_files), repaired_blocks=stats.copied_blocks,
                           repaired_bytes=stats.copied_bytes, repair_failures=stats.failed_copies,
                           repair_rate=stats.rate, last_error=stats.last_error)

    @grpc_method
    def Fsck(self, request: mpb.FsckRequest, context: Ctx) -> mpb.FsckReply:
        if request.scrub:
            return mpb.FsckReply(scrub=convert.scrub_page_pb(self._scrub_page(request.scrub_after, request.scrub_rate)))
        if request.repair and (self._repairer is None or not self._repairer.enabled):
            raise NotSupported("re-replication is off on this master (--repair-rate 0): nothing can be repaired")
        if request.rescan:
            asked = self._store.call(self._mem.request_inventories, request.delete_orphans)
            log.info("fsck: asked workers %s for their full inventories", asked)
        repaired = self._repairer.step() if request.repair and self._repairer else RoundResult()
        problems = self._read(Namespace.check)
        inventories, pending = self._store.call(self._mem.inventories)
        return convert.fsck_reply(FsckReport(
            problems=tuple(problems), replication=self._replication(), inventories=tuple(inventories),
            pending=tuple(pending), copied=repaired.copied, failed=repaired.failed, dropped=repaired.dropped,
            unplaceable=repaired.unplaceable, throttled=repaired.throttled, errors=repaired.errors))

    def _scrub_page(self, after: int, rate: int) -> ScrubPage:
        """One page of fsck --scrub (master/scrub.py); bad copies leave the metadata at once."""
        if self._repairer is None:
            raise NotSupported("this master has no data-plane client to scrub with")
        blocks = self._read(Namespace.recorded_blocks, after, scrub.PAGE_BLOCKS)
        live = {w.worker_id: w for w in self._store.call(self._mem.live_workers)}
        page = scrub.scrub_page(self._repairer.copier, blocks, live, after=after, rate=rate)
        for bad in page.corrupt + page.missing:
            self._store.call(lambda b=bad: self._ns.drop_locations(b.worker_id, [b.block_id], unlink_cache=True))
        return scrub.reported(page, lambda ino: self._read(Namespace.path_of, ino))

    # ------------------------------------------------------------------ background

    def maintain(self, stop: threading.Event) -> None:
        """Runs `maintain_step` every tick until `stop` is set."""
        tick = max(0.05, min(self._mem.lease_ms, self._mem.heartbeat_interval_ms) / 4000.0)
        self._store.call(self._mem.expect_checks_every, tick)
        while not stop.wait(tick):
            self.maintain_step(stop)

    def maintain_step(self, stop: threading.Event | None = None) -> None:
        """One round of background work, each part when its time (by the injected clock) has come:
        lease expiry (so the view shrinks even when nobody asks), clearing the restart-grace marker,
        releasing orphans of dead sessions and freeing files past their unlink grace, and the sweep
        of blocks that were allocated but never committed."""
        self._store.call(self._mem.expire)
        if not self._marker_checked and self._leases.grace_over():
            self._marker_checked = True
            self._store.call(self._clear_lease_marker)
        now = self._clock()
        if now >= self._next_orphan_sweep:
            self._next_orphan_sweep = now + ORPHAN_SWEEP_S
            self._release_orphans_of_dead_sessions()
            self._sessions.forget_silent()    # after: dead() answers the same for a forgotten session
            while self._store.call(self._ns.expire_orphans) and not (stop and stop.is_set()):
                pass
        if now >= self._next_open_block_sweep:
            self._next_open_block_sweep = now + OPEN_BLOCK_SWEEP_S
            dropped = self._store.call(self._ns.expire_open_blocks, OPEN_BLOCK_MAX_AGE_MS)
            if dropped:
                log.info("gave up %d blocks allocated but never committed", dropped)

# A connection that has not finished its HTTP/2 (and TLS) handshake by then is closed: a peer that
# opens sockets and sends nothing holds no file descriptor for longer (real clients send the
# preface at once). Issue 29: 1,100 silent sockets used to exhaust the master's 1,024 fds.
HANDSHAKE_TIMEOUT_MS = 10_000


def server_options() -> list[tuple[str, int]]:
    # The callers' keepalive pings (rpc/channel.py, every second, also without calls) are allowed:
    # gRPC's default would answer them with GOAWAY "too many pings".
    return [("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_MS),
            ("grpc.max_send_message_length", MAX_MESSAGE),
            ("grpc.max_receive_message_length", MAX_MESSAGE),
            ("grpc.so_reuseport", 0),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_recv_ping_interval_without_data_ms", 500),
            ("grpc.http2.max_ping_strikes", 0)]


def build_server(service: MasterService, token: str, *, threads: int = HANDLER_THREADS,
                 first: Sequence[grpc.ServerInterceptor] = ()) -> grpc.Server:
    """`first`: interceptors ahead of the token check (RPC metrics count refused calls too)."""
    interceptors: list[grpc.ServerInterceptor] = [*first, *([TokenInterceptor(token)] if token else [])]
    server = grpc.server(ThreadPoolExecutor(max_workers=threads, thread_name_prefix="master-rpc"),
                         interceptors=interceptors, options=server_options())
    master_pb2_grpc.add_MasterServicer_to_server(service, server)  # type: ignore[no-untyped-call]
    return server


def add_port(server: grpc.Server, address: str, tls: TlsFiles) -> int:
    """Listens on HOST:PORT: over TLS when certificates are given (rpc/tls.py; with a CA, client
    certificates are required), else plain. Returns the bound port (0: could not bind)."""
    if tls.enabled:
        return server.add_secure_port(address, server_credentials(tls))
    return server.add_insecure_port(address)
