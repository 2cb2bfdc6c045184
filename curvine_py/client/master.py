"""Typed, blocking access to the master: one gRPC channel, a deadline and the token on every call,
gRPC failures turned into CurvineError (rpc/errors.py).

The channel reconnects by itself; a call made while the master is down fails within its deadline
with `Unavailable`/`Timeout`, and works again once the master is back (no client rebuild needed).

Several masters (`a:8995,b:8995`): each call goes to the leader and follows the followers' hints
within its own deadline (rpc/leader.py). What a caller sees: the call's answer; `Unavailable` when
no master answered as the leader within the deadline (nothing was executed); and, as with one
master, `Unavailable` when the connection to the leader broke during the call: that call may or
may not have been executed (no request ids: it is not sent again), the next call finds the leader.
"""
from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TypeAlias, TypeVar

import grpc
from google.protobuf.message import Message

from curvine_py.config import DEFAULT_MASTER_PORT, parse_master_list
from curvine_py.core.cluster import ClusterReport, FsckReport, MembershipView, MountInfo, ScrubPage
from curvine_py.core.domain import (
    AddedBlock,
    Attr,
    BlockId,
    BlockInfo,
    DirEntry,
    DirLease,
    DirPage,
    FileBlocks,
    InodeId,
    LeaseRenewal,
    NewNode,
    Policy,
    PolicyAt,
    QuotaInfo,
    RenameResult,
    StatFs,
    UnlinkResult,
)
from curvine_py.core.errors import CurvineError
from curvine_py.core.posix import SetAttrChanges
from curvine_py.proto.curvine.v1 import master_pb2 as pb
from curvine_py.proto.curvine.v1.master_pb2_grpc import MasterStub
from curvine_py.rpc import convert
from curvine_py.rpc.auth import call_metadata
from curvine_py.rpc.channel import MasterChannel, master_channel
from curvine_py.rpc.errors import from_rpc_error
from curvine_py.rpc.leader import LeaderChannel
from curvine_py.rpc.tls import TlsFiles

log = logging.getLogger(__name__)

Req = TypeVar("Req", bound=Message)
Rep = TypeVar("Rep", bound=Message)
Rpc: TypeAlias = "grpc.UnaryUnaryMultiCallable[Req, Rep]"   # a string: grpc's class is not generic at run time


class _MasterRpcs:
    """The Master service's methods with their request and reply types (the generated stub is
    untyped): the one table that says which message each RPC takes and returns."""

    def __init__(self, channel: MasterChannel) -> None:
        stub = MasterStub(channel)  # type: ignore[no-untyped-call]
        self.lookup: Rpc[pb.LookupRequest, pb.AttrReply] = stub.Lookup
        self.get_attr: Rpc[pb.InodeRequest, pb.AttrReply] = stub.GetAttr
        self.resolve_path: Rpc[pb.PathRequest, pb.AttrReply] = stub.ResolvePath
        self.set_attr: Rpc[pb.SetAttrRequest, pb.AttrReply] = stub.SetAttr
        self.create: Rpc[pb.CreateRequest, pb.AttrReply] = stub.Create
        self.create_many: Rpc[pb.CreateManyRequest, pb.CreateManyReply] = stub.CreateMany
        self.link: Rpc[pb.LinkRequest, pb.AttrReply] = stub.Link
        self.unlink: Rpc[pb.UnlinkRequest, pb.UnlinkReply] = stub.Unlink
        self.rename: Rpc[pb.RenameRequest, pb.RenameReply] = stub.Rename
        self.read_dir: Rpc[pb.ReadDirRequest, pb.ReadDirReply] = stub.ReadDir
        self.read_link: Rpc[pb.InodeRequest, pb.ReadLinkReply] = stub.ReadLink
        self.get_xattr: Rpc[pb.XattrRequest, pb.XattrReply] = stub.GetXattr
        self.set_xattr: Rpc[pb.XattrRequest, pb.Empty] = stub.SetXattr
        self.list_xattr: Rpc[pb.XattrRequest, pb.XattrReply] = stub.ListXattr
        self.remove_xattr: Rpc[pb.XattrRequest, pb.Empty] = stub.RemoveXattr
        self.stat_fs: Rpc[pb.StatFsRequest, pb.StatFsReply] = stub.StatFs
        self.release_orphan: Rpc[pb.InodeRequest, pb.Empty] = stub.ReleaseOrphan
        self.acquire_dir_lease: Rpc[pb.InodeRequest, pb.DirLeaseReply] = stub.AcquireDirLease
        self.renew_dir_leases: Rpc[pb.DirLeasesRequest, pb.DirLeasesReply] = stub.RenewDirLeases
        self.release_dir_leases: Rpc[pb.DirLeasesRequest, pb.Empty] = stub.ReleaseDirLeases
        self.get_blocks: Rpc[pb.InodeRequest, pb.BlocksReply] = stub.GetBlocks
        self.add_block: Rpc[pb.AddBlockRequest, pb.AddBlockReply] = stub.AddBlock
        self.commit_file: Rpc[pb.CommitFileRequest, pb.AttrReply] = stub.CommitFile
        self.abandon_blocks: Rpc[pb.AbandonBlocksRequest, pb.Empty] = stub.AbandonBlocks
        self.set_policy: Rpc[pb.SetPolicyRequest, pb.PolicyReply] = stub.SetPolicy
        self.get_policy: Rpc[pb.PathRequest, pb.PolicyReply] = stub.GetPolicy
        self.set_quota: Rpc[pb.SetQuotaRequest, pb.Quota] = stub.SetQuota
        self.get_quota: Rpc[pb.PathRequest, pb.Quota] = stub.GetQuota
        self.get_membership: Rpc[pb.Empty, pb.Membership] = stub.GetMembership
        self.report: Rpc[pb.Empty, pb.ClusterReport] = stub.Report
        self.fsck: Rpc[pb.FsckRequest, pb.FsckReply] = stub.Fsck


class MasterClient:
    """One typed method per Master RPC the client side uses: plain arguments or domain values in
    (core/domain.py, core/cluster.py), domain values out; the requests are built and the replies
    converted here (rpc/convert.py), so no caller sees protobuf."""

    def __init__(self, address: str, *, token: str = "", timeout_s: float = 5.0, tls: TlsFiles | None = None) -> None:
        # HOST:PORT, or the comma list of several masters (InvalidArgument for a bad one)
        self.address = ",".join(parse_master_list(address, DEFAULT_MASTER_PORT))
        self._channel = master_channel(self.address, tls)
        self._rpc = _MasterRpcs(self._channel)
        self.session = uuid.uuid4().hex    # names this client to the master (directory leases)
        self._metadata = call_metadata(token, self.session)
        self.timeout_s = timeout_s

    @property
    def leader(self) -> str:
        """The master calls go to first: the leader last found, or the one address."""
        return self._channel.leader if isinstance(self._channel, LeaderChannel) else self.address

    def close(self) -> None:
        self._channel.close()

    def _call(self, rpc: Rpc[Req, Rep], request: Req, *, timeout_s: float | None = None) -> Rep:
        try:
            return rpc(request, timeout=timeout_s or self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    # -- namespace ---------------------------------------------------------------------------
    def lookup(self, parent: InodeId, name: str) -> Attr:
        return convert.attr_from_pb(self._call(self._rpc.lookup, pb.LookupRequest(parent=parent, name=name)).attr)

    def getattr(self, ino: InodeId) -> Attr:
        return convert.attr_from_pb(self._call(self._rpc.get_attr, pb.InodeRequest(ino=ino)).attr)

    def resolve(self, path: str, follow_symlinks: bool = True) -> Attr:
        request = pb.PathRequest(path=path, follow_symlinks=follow_symlinks)
        return convert.attr_from_pb(self._call(self._rpc.resolve_path, request).attr)

    def setattr(self, ino: InodeId, changes: SetAttrChanges) -> Attr:
        return convert.attr_from_pb(self._call(self._rpc.set_attr, convert.setattr_pb(ino, changes)).attr)

    def create(self, node: NewNode) -> Attr:
        return convert.attr_from_pb(self._call(self._rpc.create, convert.new_node_pb(node)).attr)

    def create_many(self, nodes: list[NewNode]) -> list[Attr | CurvineError]:
        """Several creates in one call; each item is the created inode's attributes or its error."""
        request = pb.CreateManyRequest(creates=[convert.new_node_pb(n) for n in nodes])
        return [convert.create_result_from_pb(r) for r in self._call(self._rpc.create_many, request).results]

    def link(self, ino: InodeId, new_parent: InodeId, new_name: str) -> Attr:
        request = pb.LinkRequest(ino=ino, new_parent=new_parent, new_name=new_name)
        return convert.attr_from_pb(self._call(self._rpc.link, request).attr)

    def unlink(self, parent: InodeId, name: str, *, directory: bool = False, keep_orphan: bool = False) -> UnlinkResult:
        request = pb.UnlinkRequest(parent=parent, name=name, directory=directory, keep_orphan=keep_orphan)
        return convert.unlink_from_pb(self._call(self._rpc.unlink, request))

    def rename(self, parent: InodeId, name: str, new_parent: InodeId, new_name: str,
               flags: int = 0, *, keep_orphan: bool = False) -> RenameResult:
        request = pb.RenameRequest(parent=parent, name=name, new_parent=new_parent, new_name=new_name, flags=flags,
                                   keep_orphan=keep_orphan)
        return convert.rename_from_pb(self._call(self._rpc.rename, request))

    def readdir(self, ino: InodeId, after_name: str = "", limit: int = 1000, *, eager: bool = False) -> DirPage:
        """Entries after `after_name` in name order. Their attributes are built when first read,
        or all at once with `eager` (cheaper for a caller that reads every entry's)."""
        request = pb.ReadDirRequest(ino=ino, after_name=after_name, limit=limit)
        return convert.dir_page_from_pb(self._call(self._rpc.read_dir, request), eager=eager)

    def readdir_all(self, ino: InodeId) -> list[DirEntry]:
        entries: list[DirEntry] = []
        after = ""
        while True:
            page = self.readdir(ino, after, eager=True)
            entries.extend(page.entries)
            if not page.more or not page.entries:
                return entries
            after = page.entries[-1].name

    def readlink(self, ino: InodeId) -> str:
        return str(self._call(self._rpc.read_link, pb.InodeRequest(ino=ino)).target)

    def getxattr(self, ino: InodeId, name: str) -> bytes:
        return bytes(self._call(self._rpc.get_xattr, pb.XattrRequest(ino=ino, name=name)).value)

    def setxattr(self, ino: InodeId, name: str, value: bytes, flags: int = 0) -> None:
        self._call(self._rpc.set_xattr, pb.XattrRequest(ino=ino, name=name, value=value, flags=flags))

    def listxattr(self, ino: InodeId) -> list[str]:
        return list(self._call(self._rpc.list_xattr, pb.XattrRequest(ino=ino)).names)

    def removexattr(self, ino: InodeId, name: str) -> None:
        self._call(self._rpc.remove_xattr, pb.XattrRequest(ino=ino, name=name))

    def statfs(self, ino: InodeId | None = None) -> StatFs:
        """The cluster's space (None: ino 0 on the wire), or as seen from directory `ino` (bounded by
        its nearest quota)."""
        return convert.statfs_from_pb(self._call(self._rpc.stat_fs, pb.StatFsRequest(ino=ino or 0)))

    def release_orphan(self, ino: InodeId) -> None:
        self._call(self._rpc.release_orphan, pb.InodeRequest(ino=ino))

    # -- directory leases (master/leases.py) ----------------------------------------------------
    def acquire_dir_lease(self, ino: InodeId) -> DirLease:
        return convert.dir_lease_from_pb(self._call(self._rpc.acquire_dir_lease, pb.InodeRequest(ino=ino)))

    def renew_dir_leases(self, dirs: Sequence[InodeId], mount: MountInfo | None = None) -> LeaseRenewal:
        """Also the session's heartbeat; a mount describes itself with `mount` (listed in Report)."""
        request = pb.DirLeasesRequest(dirs=dirs, mount=convert.mount_pb(mount) if mount is not None else None)
        return convert.renewal_from_pb(self._call(self._rpc.renew_dir_leases, request))

    def release_dir_leases(self, dirs: Sequence[InodeId]) -> None:
        self._call(self._rpc.release_dir_leases, pb.DirLeasesRequest(dirs=dirs))

    # -- file data ---------------------------------------------------------------------------
    def get_blocks(self, ino: InodeId) -> FileBlocks:
        return convert.file_blocks_from_pb(self._call(self._rpc.get_blocks, pb.InodeRequest(ino=ino)))

    def add_block(self, ino: InodeId, index: int, client_node: str = "") -> AddedBlock:
        request = pb.AddBlockRequest(ino=ino, index=index, client_node=client_node)
        return convert.added_block_from_pb(self._call(self._rpc.add_block, request))

    def commit(self, ino: InodeId, size: int, blocks: list[BlockInfo], set_mtime: bool = True) -> Attr:
        request = pb.CommitFileRequest(ino=ino, size=size, blocks=[convert.block_pb(b) for b in blocks],
                                       set_mtime=set_mtime)
        return convert.attr_from_pb(self._call(self._rpc.commit_file, request).attr)

    def abandon_blocks(self, ino: InodeId, block_ids: Sequence[BlockId]) -> None:
        """Frees blocks this writer allocated for `ino` and will never commit (ids that are not
        open blocks of `ino` are ignored, so a retry is harmless)."""
        self._call(self._rpc.abandon_blocks, pb.AbandonBlocksRequest(ino=ino, block_ids=block_ids))

    # -- policy and cluster ------------------------------------------------------------------
    def set_policy(self, path: str, policy: Policy) -> PolicyAt:
        request = pb.SetPolicyRequest(path=path, policy=convert.policy_pb(policy))
        return convert.policy_at_from_pb(self._call(self._rpc.set_policy, request))

    def get_policy(self, path: str) -> PolicyAt:
        return convert.policy_at_from_pb(self._call(self._rpc.get_policy, pb.PathRequest(path=path)))

    def set_quota(self, path: str, max_bytes: int, max_inodes: int) -> QuotaInfo:
        request = pb.SetQuotaRequest(path=path, max_bytes=max_bytes, max_inodes=max_inodes)
        return convert.quota_from_pb(self._call(self._rpc.set_quota, request))

    def get_quota(self, path: str) -> QuotaInfo:
        return convert.quota_from_pb(self._call(self._rpc.get_quota, pb.PathRequest(path=path)))

    def membership(self) -> MembershipView:
        return convert.membership_from_pb(self._call(self._rpc.get_membership, pb.Empty()))

    def report(self) -> ClusterReport:
        return convert.report_from_pb(self._call(self._rpc.report, pb.Empty()))

    def fsck(self, *, rescan: bool = False, repair: bool = False, timeout_s: float | None = None,
             delete_orphans: bool = False) -> FsckReport:
        """The master's consistency view (cli/fsck.py); `rescan` asks every live worker for its full
        inventory again (`delete_orphans`: unreferenced blocks found are deleted on them), `repair`
        runs one repair round before answering."""
        request = pb.FsckRequest(rescan=rescan, repair=repair, delete_orphans=delete_orphans)
        return convert.fsck_from_pb(self._call(self._rpc.fsck, request, timeout_s=timeout_s))

    def scrub_page(self, after: int, rate: int, timeout_s: float | None = None) -> ScrubPage:
        """fsck --scrub: the recorded copies of the blocks after `after` verified on their workers
        at `rate` bytes/s (master/scrub.py); loop with `next_after` until `done`."""
        request = pb.FsckRequest(scrub=True, scrub_after=after, scrub_rate=rate)
        return convert.scrub_page_from_pb(self._call(self._rpc.fsck, request, timeout_s=timeout_s).scrub)
