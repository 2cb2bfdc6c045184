"""Dump and load of a store (master/engine/transfer.py, dumpfile.py), called directly on real
SQLite files: a load reproduces every table and the inode counter, the loaded store passes its
consistency check, and each bad input (a non-empty target, a truncated, altered or foreign file,
another schema version) is refused and loads nothing."""
from __future__ import annotations

import io
import pathlib
from dataclasses import replace

import lz4.frame  # type: ignore[import-untyped]
import pytest

from curvine_py.core.errors import AlreadyExists, Corrupt, InvalidArgument, NotFound
from curvine_py.master.engine import transfer
from curvine_py.master.engine.dumpfile import DumpReader, DumpWriter, Header
from curvine_py.master.namespace import Namespace
from curvine_py.master.types import ROOT_INO, BlockInfo, FileType, Policy, StorageClass
from tests.unit.test_master_support import FakeClock, MiB, mkdir, mkfile, worker

W2 = [worker("w1"), worker("w2")]


def busy_store(path: pathlib.Path) -> Namespace:
    ns = Namespace(str(path), block_size=4 * MiB, clock_ns=FakeClock().now_ns)
    d = mkdir(ns, "d")
    ns.set_policy("/d", Policy(storage_class=StorageClass.DURABLE, replicas=2, block_size=MiB))
    ns.set_quota("/d", 1 << 30, 100)
    for i in range(5):
        f = mkfile(ns, f"f{i}", d.ino)
        grant = ns.add_block(f.ino, 0, "", W2)
        # a checksum above 2**63 is stored as a negative integer: it must survive as it is
        ns.commit_file(f.ino, 1000 + i, [BlockInfo(0, grant.block_id, 1000 + i, (1 << 64) - 5 - i,
                                                   grant.worker_ids)])
    ns.setxattr(d.ino, "user.bin", bytes(range(256)) * 3)
    ns.create(ROOT_INO, "link", FileType.SYMLINK, 0o777, symlink_target="d/f0")
    mkfile(ns, "gone")
    ns.unlink(ROOT_INO, "gone")               # the inode counter is past every inode left
    ns.save_worker(W2[0])
    return ns


def dump_bytes(ns: Namespace) -> bytes:
    out = io.BytesIO()
    with ns.snapshot():
        moved = transfer.dump(ns, out)
    assert moved.rows == sum(rows for _, rows in moved.tables) > 10
    return out.getvalue()


def everything(ns: Namespace) -> dict[str, list[tuple[object, ...]]]:
    return {table: sorted(ns.table_rows(table, cols), key=repr) for table, cols in ns.table_columns()}


def test_load_reproduces_every_table_and_the_inode_counter(tmp_path: pathlib.Path) -> None:
    source = busy_store(tmp_path / "a.db")
    data = dump_bytes(source)
    target = Namespace(str(tmp_path / "b.db"))
    moved = transfer.load(target, DumpReader(io.BytesIO(data)))
    loaded, dumped = everything(target), everything(source)
    assert loaded.pop("workers") == [] and dumped.pop("workers")    # workers register again (below)
    assert loaded == dumped
    assert moved.rows == sum(len(rows) for rows in everything(source).values())
    assert target.next_ino() == source.next_ino()
    assert target.check() == []
    assert target.cluster_id == source.cluster_id
    assert target.getxattr(target.resolve_path("/d").ino, "user.bin") == bytes(range(256)) * 3
    created = mkfile(target, "new")             # numbering goes on past the source's, never reusing
    assert created.ino == source.next_ino()


def test_a_target_with_a_namespace_is_refused_unless_forced(tmp_path: pathlib.Path) -> None:
    data = dump_bytes(busy_store(tmp_path / "a.db"))
    target = Namespace(str(tmp_path / "b.db"))
    mkfile(target, "mine")
    with pytest.raises(AlreadyExists, match="--force"):
        transfer.load(target, DumpReader(io.BytesIO(data)))
    assert [e.name for e in target.readdir(ROOT_INO)[0]] == ["mine"]
    assert target.lookup(ROOT_INO, "mine").type == FileType.REGULAR
    transfer.load(target, DumpReader(io.BytesIO(data)), force=True)
    assert target.check() == [] and target.resolve_path("/d/f4").size == 1004
    with pytest.raises(NotFound):
        target.lookup(ROOT_INO, "mine")


def refused(tmp_path: pathlib.Path, data: bytes, error: type[Exception], match: str) -> None:
    """`data` cannot be loaded, and the target is left as it was (blank)."""
    target = Namespace(str(tmp_path / "t.db"))
    with pytest.raises(error, match=match):
        transfer.load(target, DumpReader(io.BytesIO(data)))
    assert target.is_blank() and target.check() == []
    target.close()


def test_a_truncated_dump_loads_nothing(tmp_path: pathlib.Path) -> None:
    data = dump_bytes(busy_store(tmp_path / "a.db"))
    refused(tmp_path, data[:len(data) // 2], Corrupt, "truncated")
    plain = lz4.frame.decompress(data)
    refused(tmp_path, lz4.frame.compress(plain[:-10]), Corrupt, "truncated")   # a whole frame, no trailer


def test_an_altered_dump_loads_nothing(tmp_path: pathlib.Path) -> None:
    data = dump_bytes(busy_store(tmp_path / "a.db"))
    plain = bytearray(lz4.frame.decompress(data))
    at = plain.index(b"user.bin")
    plain[at] ^= 0x01                               # a well-formed file whose content changed
    refused(tmp_path, lz4.frame.compress(bytes(plain)), Corrupt, "checksum mismatch")
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0xFF              # the compressed bytes changed
    refused(tmp_path, bytes(damaged), Corrupt, "damaged|truncated|checksum")
    refused(tmp_path, data + lz4.frame.compress(b"more"), Corrupt, "follow the trailer")


def test_a_foreign_file_or_another_schema_is_refused(tmp_path: pathlib.Path) -> None:
    refused(tmp_path, b"not a dump at all", Corrupt, "not an lz4 dump|damaged")
    refused(tmp_path, lz4.frame.compress(b"\x52\x00\x00\x00\x02hi"), Corrupt, "no header")
    out = io.BytesIO()
    DumpWriter(out, Header(schema_version=99, next_ino=2, rows=0, tables=())).close()
    refused(tmp_path, out.getvalue(), InvalidArgument, "schema version 99")
    out = io.BytesIO()
    source = busy_store(tmp_path / "a.db")
    DumpWriter(out, Header(source.schema_version(), 2, 0, (("inodes", ("ino",)),))).close()
    refused(tmp_path, out.getvalue(), InvalidArgument, "tables do not match")


def test_a_dump_beside_a_writing_master_is_one_state(tmp_path: pathlib.Path) -> None:
    writer = busy_store(tmp_path / "a.db")
    reader = writer.reader()                  # what `meta dump` opens: a read-only connection
    out = io.BytesIO()
    with reader.snapshot():
        before = transfer.count_rows(reader)
        for i in range(30):                   # commits by the writer while the dump's snapshot is open
            mkfile(writer, f"late{i}")
        moved = transfer.dump(reader, out)
    assert moved.rows == before
    target = Namespace(str(tmp_path / "b.db"))
    transfer.load(target, DumpReader(io.BytesIO(out.getvalue())))
    assert target.check() == []
    with pytest.raises(NotFound):
        target.lookup(ROOT_INO, "late0")
    assert transfer.count_rows(writer) == before + 60     # each create: an inode and a dentry


def crafted_dump(source: Namespace, edit: str, params: tuple[object, ...] = ()) -> bytes:
    """A dump of `source` after `edit`: written by the dump code itself, so its checksum is right."""
    with source.transaction():
        source._db.execute(edit, params)
    return dump_bytes(source)


def test_a_dump_with_a_directory_cycle_is_refused_and_loads_nothing(tmp_path: pathlib.Path) -> None:
    source = busy_store(tmp_path / "a.db")
    a = mkdir(source, "a")
    b = mkdir(source, "b", a.ino)
    # /a/b/a: a's name and parent move under b, so a and b are each other's parent, cut off from the
    # root (the root's nlink is off by one too: it lost a subdirectory)
    with source.transaction():
        source._db.execute("UPDATE inodes SET parent = ? WHERE ino = ?", (b.ino, a.ino))
    data = crafted_dump(source, "UPDATE dentries SET parent = ? WHERE ino = ?", (b.ino, a.ino))
    unreachable = [p for p in source.check() if "not reachable" in p]
    assert unreachable == [f"inode {ino} is not reachable from the root (a directory cycle or a detached subtree)"
                           for ino in (a.ino, b.ino)]
    refused(tmp_path, data, InvalidArgument, "does not hold a sound namespace.*directory cycle")


def test_a_dump_with_a_dangling_name_is_refused(tmp_path: pathlib.Path) -> None:
    source = busy_store(tmp_path / "a.db")
    data = crafted_dump(source, "INSERT INTO dentries (parent, name, ino) VALUES (1, 'ghost', 99999)")
    refused(tmp_path, data, InvalidArgument, "dentry points to missing inode 99999")


def test_a_dumps_worker_rows_are_not_loaded(tmp_path: pathlib.Path) -> None:
    source = busy_store(tmp_path / "a.db")
    planted = worker("stranger")
    with source.transaction():
        source.save_worker(replace(planted, live=True))
        source.save_worker(replace(W2[0], live=True))
    assert {w.worker_id for w in source.load_workers() if w.live} == {"w1", "stranger"}
    target = Namespace(str(tmp_path / "b.db"))
    transfer.load(target, DumpReader(io.BytesIO(dump_bytes(source))))
    assert target.load_workers() == []
    from curvine_py.master.membership import Membership
    assert Membership(target).view().workers == ()     # nobody is reached until it registers again
    assert target.resolve_path("/d/f4").size == 1004    # the namespace and its block locations did load
