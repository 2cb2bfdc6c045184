"""rpc/convert.py: every domain value survives domain -> protobuf -> domain unchanged, over the full
range of each wire field (uint32/uint64/int64/double/strings); bad wire values get a clear answer."""
from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from curvine_py.core import cluster, domain
from curvine_py.core.errors import InvalidArgument, NoSpace
from curvine_py.core.posix import SetAttrChanges
from curvine_py.proto.curvine.v1 import common_pb2 as cpb
from curvine_py.proto.curvine.v1 import master_pb2 as mpb
from curvine_py.rpc import convert

T = TypeVar("T")

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=20)
texts = st.lists(text, max_size=4).map(tuple)
ratio = st.floats(allow_nan=False)

attrs = st.builds(domain.Attr, ino=u64, type=st.sampled_from(domain.FileType), mode=u32, uid=u32, gid=u32,
                  size=u64, nlink=u32, atime_ns=i64, mtime_ns=i64, ctime_ns=i64, rdev=u64, generation=u64,
                  block_size=u64, stored_bytes=u64)
policies = st.builds(domain.Policy, storage_class=st.sampled_from(domain.StorageClass), replicas=u32, ttl_ms=u64,
                     block_size=u64, placement=text, compress=st.booleans())
blocks = st.builds(domain.BlockInfo, index=u32, block_id=u64, length=u64, checksum=u64, worker_ids=texts)
quotas = st.builds(domain.QuotaInfo, ino=u64, path=text, max_bytes=u64, max_inodes=u64, used_bytes=u64,
                   used_inodes=u64)
workers = st.builds(cluster.WorkerInfo, worker_id=text, host=text, port=u32, unix_socket=text, node=text,
                    capacity=u64, used=u64, available=u64, lm_port=u32, live=st.booleans(),
                    last_heartbeat_ms=i64, blocks=u64, objects=u64, evictions=u64, free_space_ratio=ratio,
                    reserve_bytes=u64, fs_free_bytes=u64, hits=u64, misses=u64, metrics_port=u32)
mounts = st.builds(cluster.MountInfo, node=text, mountpoint=text, metrics_port=u32, last_heartbeat_ms=i64)
replications = st.builds(cluster.Replication, under_replicated=u64, lost=u64, surplus=u64, lost_files=texts,
                         repaired_blocks=u64, repaired_bytes=u64, repair_failures=u64, repair_rate=u64,
                         last_error=text)
inventories = st.builds(cluster.Inventory, worker_id=text, reported=u64, missing=u64, orphans=u64,
                        orphans_deleted=st.booleans())
copies = st.builds(cluster.CorruptCopy, block_id=u64, worker_id=text, path=text, reason=text)
optional_u32, optional_u64, optional_i64 = st.none() | u32, st.none() | u64, st.none() | i64


def tuples(s: st.SearchStrategy[T]) -> st.SearchStrategy[tuple[T, ...]]:
    return st.lists(s, max_size=3).map(tuple)


def roundtrip(to_pb: Callable[[T], Any], from_pb: Callable[[Any], T], value: T) -> None:
    message = to_pb(value)
    again = type(message).FromString(message.SerializeToString())   # over the wire, not just in memory
    assert from_pb(again) == value


@given(attrs)
def test_attr(value: domain.Attr) -> None:
    roundtrip(convert.attr_pb, convert.attr_from_pb, value)


@given(attrs)
def test_attr_reply(value: domain.Attr) -> None:
    roundtrip(convert.attr_reply, lambda r: convert.attr_from_pb(r.attr), value)


@given(policies)
def test_policy(value: domain.Policy) -> None:
    roundtrip(convert.policy_pb, convert.policy_from_pb, value)


@given(st.builds(domain.PolicyAt, policy=policies, path=text))
def test_policy_at(value: domain.PolicyAt) -> None:
    roundtrip(convert.policy_reply, convert.policy_at_from_pb, value)


@given(st.builds(domain.NewNode, parent=u64, name=text, type=st.sampled_from(domain.FileType), mode=u32, uid=u32,
                 gid=u32, rdev=u64, target=text, exclusive=st.booleans(), truncate=st.booleans()))
def test_new_node(value: domain.NewNode) -> None:
    roundtrip(convert.new_node_pb, convert.new_node_from_pb, value)


@given(st.builds(SetAttrChanges, mode=optional_u32, uid=optional_u32, gid=optional_u32, size=optional_u64,
                 atime_ns=optional_i64, mtime_ns=optional_i64, atime_now=st.booleans(), mtime_now=st.booleans(),
                 ctime_ns=optional_i64), u64)
def test_setattr_changes(value: SetAttrChanges, ino: int) -> None:
    message = convert.setattr_pb(ino, value)
    assert message.ino == ino
    roundtrip(lambda v: convert.setattr_pb(ino, v), convert.setattr_from_pb, value)


def test_setattr_sends_a_zero_it_was_given() -> None:
    """Presence, not the value, says what changes: a truncate to 0 and a mode of 0 are sent."""
    message = convert.setattr_pb(5, SetAttrChanges(size=0, mode=0))
    assert message.HasField("size") and message.HasField("mode") and not message.HasField("uid")


@given(st.one_of(attrs, st.builds(NoSpace, text)))
def test_create_result(value: domain.Attr | NoSpace) -> None:
    again = convert.create_result_from_pb(convert.create_result_pb(value))
    if isinstance(value, domain.Attr):
        assert again == value
    else:
        assert isinstance(again, NoSpace) and again.message == value.message


@given(st.builds(domain.UnlinkResult, ino=u64, nlink=u32))
def test_unlink(value: domain.UnlinkResult) -> None:
    roundtrip(convert.unlink_reply, convert.unlink_from_pb, value)


@given(st.builds(domain.RenameResult, replaced_ino=u64, replaced_nlink=u32))
def test_rename(value: domain.RenameResult) -> None:
    roundtrip(convert.rename_reply, convert.rename_from_pb, value)


dir_pages = st.builds(domain.DirPage, entries=tuples(st.builds(domain.DirEntry, name=text, attr=attrs)),
                      more=st.booleans())


@given(dir_pages)
def test_dir_page(value: domain.DirPage) -> None:
    roundtrip(lambda p: convert.readdir_reply(list(p.entries), p.more), convert.dir_page_from_pb, value)


@given(dir_pages)
def test_dir_page_eager(value: domain.DirPage) -> None:
    roundtrip(lambda p: convert.readdir_reply(list(p.entries), p.more),
              lambda r: convert.dir_page_from_pb(r, eager=True), value)


@given(dir_pages)
def test_deferred_entries_read_as_the_eager_ones(value: domain.DirPage) -> None:
    """Names and inode numbers without building the Attr; the Attr once read, the same each time,
    and equal, hash for hash, to the eager conversion's."""
    reply = mpb.ReadDirReply.FromString(convert.readdir_reply(list(value.entries), value.more).SerializeToString())
    deferred, eager = convert.dir_page_from_pb(reply), convert.dir_page_from_pb(reply, eager=True)
    assert [(e.name, e.ino) for e in deferred.entries] == [(e.name, e.attr.ino) for e in value.entries]
    for lazy, built, original in zip(deferred.entries, eager.entries, value.entries, strict=True):
        first = lazy.attr
        assert first == original.attr and lazy.attr is first
        assert lazy == built == original and hash(lazy) == hash(built) == hash(original)
        assert repr(lazy) == repr(original)
        assert pickle.loads(pickle.dumps(lazy)) == original


def assert_frozen(entry: domain.DirEntry) -> None:
    before = (entry.name, entry.ino)
    for name in ("name", "attr"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(entry, name, None)
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(entry, name)
    # Not a field: refused too (a frozen slotted dataclass answers TypeError there: its __setattr__'s
    # super(cls, self) names the class before slots; a deferred entry says FrozenInstanceError).
    with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError)):
        entry.ino = domain.InodeId(0)  # type: ignore[misc]
    assert (entry.name, entry.ino) == before


@given(st.builds(domain.DirEntry, name=text, attr=attrs))
def test_a_deferred_entry_builds_its_attr_once_on_first_read_and_stays_frozen(entry: domain.DirEntry) -> None:
    built: list[domain.Attr] = []

    def convert_once(raw: domain.Attr) -> domain.Attr:
        built.append(raw)
        return raw

    lazy = domain.DirEntry.deferred(entry.name, entry.attr.ino, convert_once, entry.attr)
    assert_frozen(lazy)
    assert lazy.name == entry.name and lazy.ino == entry.ino and built == []
    assert lazy.attr == entry.attr and lazy.attr == entry.attr and len(built) == 1
    assert_frozen(lazy)
    assert_frozen(entry)
    assert lazy == entry


def test_an_entry_differs_from_another_by_name_or_attr() -> None:
    a = domain.blank_attr(domain.InodeId(5))
    entry = domain.DirEntry("x", a)
    assert entry != domain.DirEntry("y", a)
    assert entry != domain.DirEntry("x", dataclasses.replace(a, size=1))
    assert entry != ("x", a)
    assert len({entry, domain.DirEntry("x", a), domain.DirEntry.deferred("x", a.ino, lambda v: v, a)}) == 1


@given(st.builds(domain.StatFs, capacity=u64, used=u64, available=u64, files=u64, block_size=u64, max_files=u64))
def test_statfs(value: domain.StatFs) -> None:
    roundtrip(convert.statfs_pb, convert.statfs_from_pb, value)


@given(quotas)
def test_quota(value: domain.QuotaInfo) -> None:
    roundtrip(convert.quota_pb, convert.quota_from_pb, value)


@given(st.builds(domain.DirLease, granted=st.just(True), term_ms=u32, names=texts))
def test_dir_lease(value: domain.DirLease) -> None:
    roundtrip(lambda v: convert.dir_lease_reply(list(v.names), v.term_ms), convert.dir_lease_from_pb, value)


def test_dir_lease_refused() -> None:
    assert convert.dir_lease_from_pb(convert.dir_lease_reply(None, 5000)) == domain.DirLease(granted=False)


@given(st.builds(domain.LeaseRenewal, kept=tuples(u64), term_ms=u32, session_timeout_ms=u32))
def test_lease_renewal(value: domain.LeaseRenewal) -> None:
    roundtrip(lambda v: convert.dir_leases_reply(list(v.kept), v.term_ms, v.session_timeout_ms),
              convert.renewal_from_pb, value)


@given(blocks)
def test_block(value: domain.BlockInfo) -> None:
    roundtrip(convert.block_pb, convert.block_from_pb, value)


@given(st.builds(domain.FileBlocks, attr=attrs, blocks=tuples(blocks), policy=policies))
def test_file_blocks(value: domain.FileBlocks) -> None:
    roundtrip(convert.blocks_reply, convert.file_blocks_from_pb, value)


@given(st.builds(domain.AddedBlock, block_id=u64, worker_ids=texts, storage_class=st.sampled_from(domain.StorageClass),
                 ttl_ms=u64, block_size=u64))
def test_added_block(value: domain.AddedBlock) -> None:
    roundtrip(convert.added_block_reply, convert.added_block_from_pb, value)


@given(workers)
def test_worker(value: cluster.WorkerInfo) -> None:
    roundtrip(convert.worker_pb, convert.worker_from_pb, value)


@given(st.builds(cluster.MembershipView, epoch=u64, workers=tuples(workers), cluster_id=text))
def test_membership(value: cluster.MembershipView) -> None:
    roundtrip(convert.membership_pb, convert.membership_from_pb, value)


@given(mounts)
def test_mount(value: cluster.MountInfo) -> None:
    roundtrip(convert.mount_pb, convert.mount_from_pb, value)


@given(st.builds(cluster.ClusterReport, cluster_id=text, epoch=u64, workers=tuples(workers), capacity=u64, used=u64,
                 available=u64, files=u64, directories=u64, blocks=u64, dir_leases=u32, quotas=tuples(quotas),
                 replication=replications, metrics_port=u32, status_port=u32, mounts=tuples(mounts)))
def test_report(value: cluster.ClusterReport) -> None:
    roundtrip(convert.report_pb, convert.report_from_pb, value)


@given(st.builds(cluster.FsckReport, problems=texts, replication=replications, inventories=tuples(inventories),
                 pending=texts, copied=u64, failed=u64, dropped=u64, unplaceable=u64, throttled=st.booleans(),
                 errors=texts))
def test_fsck(value: cluster.FsckReport) -> None:
    roundtrip(convert.fsck_reply, convert.fsck_from_pb, value)


@given(st.builds(cluster.ScrubPage, next_after=u64, done=st.booleans(), copies=u64, bytes=u64, skipped=u64,
                 corrupt=tuples(copies), missing=tuples(copies), errors=texts))
def test_scrub_page(value: cluster.ScrubPage) -> None:
    roundtrip(convert.scrub_page_pb, convert.scrub_page_from_pb, value)


@pytest.mark.parametrize("value", list(domain.StorageClass))
def test_storage_class_for_a_header_field(value: domain.StorageClass) -> None:
    assert convert.storage_class_from_pb(convert.storage_class_pb(value)) == value
    assert cpb.StorageClass.Name(convert.storage_class_pb(value)).endswith(value.name)


def test_an_unknown_storage_class_is_refused() -> None:
    """proto3 enums are open: a number this build does not know is InvalidArgument, never stored."""
    with pytest.raises(InvalidArgument, match="unknown storage class 7"):
        convert.policy_from_pb(cpb.Policy(storage_class=7))  # type: ignore[arg-type]


def test_an_unknown_file_type_from_a_newer_master_shows_without_type_bits() -> None:
    attr = convert.attr_from_pb(cpb.Attr(ino=3, type=42, mode=0o644))  # type: ignore[arg-type]
    assert attr.type == domain.FileType.UNSPECIFIED and attr.st_mode == 0o644


def test_heartbeat_usage_reads_every_field() -> None:
    request = mpb.HeartbeatRequest(capacity=1, used=2, available=3, blocks=4, objects=5, evictions=6,
                                   free_space_ratio=0.5, reserve_bytes=7, fs_free_bytes=8, hits=9, misses=10,
                                   metrics_port=11)
    assert convert.usage_from_pb(request) == cluster.Usage(1, 2, 3, 4, 5, 6, 0.5, 7, 8, 9, 10, 11)
