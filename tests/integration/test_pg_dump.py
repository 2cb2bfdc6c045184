"""`curvine-py meta dump` / `meta load` across engines: a 100k-file SQLite namespace (directories,
multi-block files with two locations each, xattrs, a quota, a policy, a symlink, a hard link) is
dumped, loaded into PostgreSQL, and every table compares equal (names, attributes, xattrs, block
maps, the inode counter); dumped again from PostgreSQL and loaded into a new SQLite file it is the
original row for row, and both pass their consistency check. A load into a database a master leads
is refused, naming the master."""
from __future__ import annotations

import pathlib

from curvine_py.master.engine.open import open_namespace, open_reader
from curvine_py.master.engine.url import parse_meta_url
from curvine_py.master.namespace import Namespace
from curvine_py.master.types import ROOT_INO, BlockInfo, FileType, Policy, StorageClass
from tests import pgserver
from tests.integration.test_cli import cli
from tests.unit.test_master_support import FakeClock, MiB, worker

FILES = 100_000
DIRS = 100
BLOCK_FILES = 5_000              # files with 2 committed blocks, each on 2 workers
W2 = [worker("w1"), worker("w2")]



def big_store(path: pathlib.Path) -> None:
    ns = Namespace(str(path), block_size=4 * MiB, clock_ns=FakeClock().now_ns)
    try:
        with ns.batch():
            dirs = [ns.mkdir(ROOT_INO, f"d{i:03d}").ino for i in range(DIRS)]
            for i in range(FILES):
                f = ns.create(dirs[i % DIRS], f"kv-chunk-{i:09d}", FileType.REGULAR, 0o644)
                if i < BLOCK_FILES:
                    grants = [ns.add_block(f.ino, index, "", W2) for index in range(2)]
                    ns.commit_file(f.ino, 5 * MiB, [
                        BlockInfo(index, g.block_id, (4 if index == 0 else 1) * MiB, (1 << 64) - 1 - i, g.worker_ids)
                        for index, g in enumerate(grants)])
                if i % 50 == 0:
                    ns.setxattr(f.ino, "user.tag", bytes([i % 256]) * 40 + b"\x00end")
        ns.set_policy("/d000", Policy(storage_class=StorageClass.CACHE, replicas=1, block_size=MiB))
        ns.set_quota("/d001", 1 << 40, 10_000_000)
        ns.create(ROOT_INO, "link", FileType.SYMLINK, 0o777, symlink_target="d002/kv-chunk-000000002")
        first = ns.resolve_path("/d003/kv-chunk-000000003")
        ns.link(first.ino, ROOT_INO, "hard")
        ns.unlink(dirs[4], "kv-chunk-000000004")      # the inode counter runs past every inode left
        ns.save_worker(W2[0])
        assert ns.check() == []
    finally:
        ns.close()


def tables(ns: Namespace) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table; meta values as text (PostgreSQL keeps them in a TEXT column),
    without the keys only a PostgreSQL leader writes."""
    with ns.snapshot():
        out: dict[str, list[tuple[object, ...]]] = {}
        for table, columns in ns.table_columns():
            rows = [tuple(row) for row in ns.table_rows(table, columns)]
            if table == "meta":
                rows = [(k, str(v)) for k, v in rows if k not in ("leader_term", "leader_address")]
            out[table] = sorted(rows, key=repr)
        out["next_ino"] = [(ns.next_ino(),)]
    return out


def test_a_100k_file_namespace_moves_sqlite_to_postgresql_and_back(tmp_path: pathlib.Path,
                                                                    pg: pgserver.PgServer) -> None:
    source = tmp_path / "src" / "meta.db"
    source.parent.mkdir()
    big_store(source)
    dump = tmp_path / "ns.dump"
    assert cli("meta", "dump", "--data-dir", str(source.parent), str(dump)).returncode == 0
    url = pg.url("loaded")
    loaded = cli("meta", "load", "--meta", url, str(dump))
    assert loaded.returncode == 0, loaded.stderr
    assert pgserver.PASSWORD.encode() not in loaded.stderr

    original = Namespace(str(source), read_only=True)
    on_pg = open_reader(parse_meta_url(url))
    try:
        want = tables(original)
        assert len(want["inodes"]) > FILES and len(want["locations"]) == 4 * (BLOCK_FILES - 1)   # one unlinked
        assert want.pop("workers")       # a load keeps no worker row: each registers again
        got_pg = tables(on_pg)
        assert got_pg.pop("workers", []) == []
        for table in want:
            diff = set(want[table]) ^ set(got_pg.get(table, []))
            assert not diff, (table, sorted(diff, key=repr)[:4])
        assert got_pg == want
        with on_pg.snapshot():
            assert on_pg.check() == []
            f = on_pg.resolve_path("/d000/kv-chunk-000000000")
            assert on_pg.getxattr(f.ino, "user.tag") == b"\x00" * 40 + b"\x00end"
            blocks = on_pg.get_blocks(f.ino).blocks
            assert [(b.index, b.length, b.checksum, b.worker_ids) for b in blocks] == \
                [(0, 4 * MiB, (1 << 64) - 1, ("w1", "w2")), (1, MiB, (1 << 64) - 1, ("w1", "w2"))]
    finally:
        on_pg.close()

    # Back: PostgreSQL -> a new SQLite file, row for row the original (typed meta values too).
    back_dump = tmp_path / "back.dump"
    assert cli("meta", "dump", "--meta", url, str(back_dump)).returncode == 0
    back_dir = tmp_path / "back"
    assert cli("meta", "load", "--data-dir", str(back_dir), str(back_dump)).returncode == 0
    back = Namespace(str(back_dir / "meta.db"), read_only=True)
    try:
        back_tables = tables(back)
        assert back_tables.pop("workers", []) == [] and back_tables == want
        with back.snapshot():
            assert back.check() == []
            assert back.epoch() == original.epoch() and back.cluster_id == original.cluster_id
        typed = "SELECT key, value, typeof(value) FROM meta ORDER BY key"
        assert back._db.execute(typed).fetchall() == original._db.execute(typed).fetchall()
    finally:
        back.close()
        original.close()

    # A master leading the database: a load is refused and names it.
    leader = open_namespace(parse_meta_url(url), advertise="10.9.8.7:8995")
    try:
        busy = cli("meta", "load", "--meta", url, "--force", str(dump))
        assert busy.returncode == 1 and b"10.9.8.7:8995" in busy.stderr, busy.stderr
        new = leader.create(ROOT_INO, "after-load", FileType.REGULAR)
        assert new.ino == want["next_ino"][0][0]                    # numbering goes on, never reusing
        leader.unlink(ROOT_INO, "after-load")
    finally:
        leader.close()
