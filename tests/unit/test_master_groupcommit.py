"""Group commit without a SAVEPOINT per call (store/pgfast.py, pgfuncs.py on PostgreSQL; SQLite keeps
its savepoints): inside one batch, a call that fails with an expected error (EEXIST, ENOENT, ENOTDIR,
EISDIR, ENOTEMPTY, EINVAL, EDQUOT) leaves nothing of itself and keeps its neighbours' work; the same
errors with the same words on both engines; an unexpected server error or a session broken inside a
batch fails the whole batch and acknowledges none of it; a version-3 database gets the functions."""
from __future__ import annotations

import pathlib
import stat
from collections.abc import Callable

import psycopg
import pytest

from curvine_py.core.errors import (
    AlreadyExists,
    CurvineError,
    DirectoryNotEmpty,
    InvalidArgument,
    IsADirectory,
    NotADirectory,
    NotFound,
    QuotaExceeded,
    Unavailable,
)
from curvine_py.master.engine.open import open_namespace
from curvine_py.master.engine.url import parse_meta_url
from curvine_py.master.namespace import SCHEMA_VERSION, Namespace
from curvine_py.master.types import ROOT_INO, Attr, FileType, Policy, RenameResult, UnlinkResult
from tests import pgserver
from tests.unit.test_master_support import (
    FakeClock,
    MiB,
    mkdir,
    mkfile,
    on_postgresql,
    open_store,
    raw_execute,
)


def attempt(fn: Callable[[], object]) -> object:
    """A call's answer as the store thread keeps it: its result, or the exception it raised."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the answer under test
        return exc


def names(ns: Namespace, ino: int = ROOT_INO) -> list[str]:
    return [e.name for e in ns.readdir(ino)[0]]


def test_failing_calls_in_a_batch_leave_nothing_and_keep_their_neighbours(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    full = mkdir(ns, "full")
    mkfile(ns, "x", full.ino)
    f = mkfile(ns, "f")
    with ns.batch():
        outcomes = [
            attempt(lambda: mkfile(ns, "a", d.ino)),
            attempt(lambda: mkfile(ns, "a", d.ino)),                          # EEXIST
            attempt(lambda: mkfile(ns, "b", 999_999)),                        # no parent: ENOENT
            attempt(lambda: mkfile(ns, "b", f.ino)),                          # ENOTDIR
            attempt(lambda: ns.unlink(d.ino, "nope")),                        # ENOENT
            attempt(lambda: ns.unlink(ROOT_INO, "full", directory=True)),     # ENOTEMPTY
            attempt(lambda: ns.unlink(ROOT_INO, "d")),                        # EISDIR
            attempt(lambda: ns.unlink(ROOT_INO, "f", directory=True)),        # ENOTDIR
            attempt(lambda: ns.rename(d.ino, "a", ROOT_INO, "full")),         # a file over a directory
            attempt(lambda: ns.rename(ROOT_INO, "full", ROOT_INO, "f")),      # a directory over a file
            attempt(lambda: ns.rename(ROOT_INO, "d", d.ino, "sub")),          # into its own subtree
            attempt(lambda: ns.rename(d.ino, "gone", ROOT_INO, "g")),         # ENOENT
            attempt(lambda: ns.rename(d.ino, "a", d.ino, "a2")),
            attempt(lambda: mkfile(ns, "c", d.ino)),
            attempt(lambda: ns.unlink(d.ino, "c")),
            attempt(lambda: mkfile(ns, "c", d.ino)),
        ]
    kinds = [type(o) for o in outcomes]
    assert kinds == [Attr, AlreadyExists, NotFound, NotADirectory, NotFound, DirectoryNotEmpty, IsADirectory,
                     NotADirectory, IsADirectory, NotADirectory, InvalidArgument, NotFound, RenameResult, Attr,
                     UnlinkResult, Attr], outcomes
    # The words are the general path's, on both engines.
    assert [str(o) for o in outcomes[1:6]] == [
        f"'a' exists in {d.ino}", "no inode 999999", f"inode {f.ino} is not a directory",
        f"'nope' not found in {d.ino}", "'full' is not empty"]
    assert str(outcomes[10]) == "cannot move a directory into its own subtree"
    committed = ns.reader()                   # committed state only: what the batch made durable
    try:
        assert names(committed) == ["d", "f", "full"]
        assert names(committed, d.ino) == ["a2", "c"]
        assert names(committed, full.ino) == ["x"]
        assert committed.getattr(d.ino).nlink == 2 and committed.getattr(ROOT_INO).nlink == 4
    finally:
        committed.close()


def test_a_quota_error_in_a_batch_rolls_back_only_its_call(ns: Namespace) -> None:
    q = mkdir(ns, "q")
    ns.set_quota("/q", 0, 2)
    with ns.batch():
        outcomes = [
            attempt(lambda: mkfile(ns, "a", q.ino)),
            attempt(lambda: mkfile(ns, "b", q.ino)),
            attempt(lambda: mkfile(ns, "c", q.ino)),      # the third name: EDQUOT
            attempt(lambda: mkfile(ns, "z")),
            attempt(lambda: ns.rename(ROOT_INO, "z", q.ino, "z")),   # EDQUOT too
            attempt(lambda: ns.unlink(q.ino, "a")),
            attempt(lambda: mkfile(ns, "c", q.ino)),      # room again
        ]
    assert [type(o) for o in outcomes] == [Attr, Attr, QuotaExceeded, Attr, QuotaExceeded, UnlinkResult, Attr]
    assert names(ns, q.ino) == ["b", "c"] and names(ns) == ["q", "z"]
    assert ns.get_quota("/q").used_inodes == 2


def test_lookups_and_walks_answer_alike_on_both_engines(ns: Namespace) -> None:
    d = mkdir(ns, "d")
    f = mkfile(ns, "f", d.ino)
    ns.create(ROOT_INO, "link", FileType.SYMLINK, 0o777, symlink_target="d/f")
    reader = ns.reader()
    try:
        for store in (ns, reader):
            with store.snapshot():
                assert store.lookup(d.ino, "f").ino == f.ino
            with store.snapshot():
                assert store.resolve_path("/d/f").ino == f.ino
            assert store.resolve_path("/link").ino == f.ino                       # a symlink: the general walk
            assert store.resolve_path("/link", follow_symlinks=False).type == FileType.SYMLINK
            assert store.resolve_path("/").ino == ROOT_INO
            assert store.resolve_path("/d/./f").ino == f.ino
            for call, error, words in (
                    (lambda s=store: s.lookup(d.ino, "nope"), NotFound, f"'nope' not found in {d.ino}"),
                    (lambda s=store: s.lookup(f.ino, "x"), NotADirectory, f"inode {f.ino} is not a directory"),
                    (lambda s=store: s.lookup(999_999, "x"), NotFound, "no inode 999999"),
                    (lambda s=store: s.resolve_path("/d/nope"), NotFound, "/d/nope: 'nope' not found"),
                    (lambda s=store: s.resolve_path("/d/f/x"), NotADirectory, "/d/f/x: a component is not a directory"),
                    (lambda s=store: s.resolve_path("/d/f/"), NotADirectory, "/d/f/: a component is not a directory"),
                    (lambda s=store: s.resolve_path("d/f"), InvalidArgument, "path must be absolute: 'd/f'")):
                with pytest.raises(error) as caught:
                    call()
                assert str(caught.value) == words
    finally:
        reader.close()


def test_a_version_3_database_gets_the_functions(meta_engine: str, tmp_path: pathlib.Path, clock: FakeClock) -> None:
    ns = open_store(tmp_path, clock)
    mkdir(ns, "d")
    ns.close()
    statements = ["UPDATE meta SET value='3' WHERE key='schema_version'"]
    if on_postgresql():          # what a version-3 master left: none of the functions
        statements += [f"DROP FUNCTION {name}" for name in (
            "curvine_create", "curvine_unlink", "curvine_rename", "curvine_walk", "curvine_unlinked_from",
            "curvine_free_inode")]
    raw_execute(tmp_path, *statements)
    again = open_store(tmp_path, clock)
    try:
        assert again.schema_version() == SCHEMA_VERSION == 4
        d = again.lookup(ROOT_INO, "d")
        assert mkfile(again, "f", d.ino).ino == again.resolve_path("/d/f").ino
        assert again.rename(d.ino, "f", d.ino, "g") == RenameResult()
        assert again.unlink(d.ino, "g").nlink == 0
        assert again.check() == []
    finally:
        again.close()


# ---------------------------------------------------------------- PostgreSQL only: the batch as a whole


def _store(pg: pgserver.PgServer, name: str) -> Namespace:
    return open_namespace(parse_meta_url(pg.url(name)))


def test_an_unexpected_server_error_fails_the_whole_batch_and_acknowledges_none(pg: pgserver.PgServer) -> None:
    ns = _store(pg, "gc_boom")
    try:
        mkfile(ns, "before")
        with psycopg.connect(pg.url("gc_boom", create=False), autocommit=True) as raw:
            # A failure the functions cannot foresee (in production: a full disk, a bug).
            raw.execute("CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                        "IF NEW.name = 'boom' THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$")
            raw.execute("CREATE TRIGGER boom BEFORE INSERT ON dentries FOR EACH ROW EXECUTE FUNCTION boom()")
        outcomes: list[object] = []
        with pytest.raises(CurvineError, match="metadata commit failed"), ns.batch():
            outcomes += [attempt(lambda: mkfile(ns, "a")), attempt(lambda: mkfile(ns, "boom")),
                         attempt(lambda: mkfile(ns, "c"))]
        assert isinstance(outcomes[0], Attr) and isinstance(outcomes[1], psycopg.Error)
        assert not isinstance(outcomes[2], Attr)       # nothing after the failure pretends to succeed
        assert names(ns) == ["before"]                 # none of the batch is durable, the earlier create is
        with ns.batch():                               # and the next batch works
            mkfile(ns, "a")
            mkfile(ns, "c")
        assert names(ns) == ["a", "before", "c"]
        assert ns.check() == []
    finally:
        ns.close()


def test_a_session_broken_inside_a_batch_fails_the_rest_of_it(pg: pgserver.PgServer) -> None:
    ns = _store(pg, "gc_cut")
    try:
        mkfile(ns, "before")
        outcomes: list[object] = []
        with pytest.raises(Unavailable), ns.batch():
            outcomes.append(attempt(lambda: mkfile(ns, "a")))
            pid = ns._db.conn.info.backend_pid
            assert pg.psql(f"SELECT pg_terminate_backend({pid}, 10000)").strip() == "t"   # returns once it exited
            outcomes += [attempt(lambda: mkfile(ns, "b")), attempt(lambda: ns.unlink(ROOT_INO, "before"))]
        assert isinstance(outcomes[0], Attr)
        assert [type(o) for o in outcomes[1:]] == [Unavailable, Unavailable]
        # Never a new transaction on a reconnected session in the middle: that COMMIT would have
        # acknowledged `a`, which died with the old session.
        mkfile(ns, "a")                                # the next transaction reconnects
        assert names(ns) == ["a", "before"]            # and `b` is not there, `before` still is
        assert ns.check() == []
    finally:
        ns.close()


def test_the_one_statement_paths_keep_the_general_bookkeeping(ns: Namespace) -> None:
    """What the functions do besides the names, the same on both engines: the block size of the
    nearest policy, setgid inheritance, a replaced file's other name and an open file kept as an
    orphan by its session."""
    kv = mkdir(ns, "kv")
    deep = mkdir(ns, "deep", mkdir(ns, "sub", kv.ino).ino)
    ns.set_policy("/kv", Policy(block_size=MiB))
    assert mkfile(ns, "f", deep.ino).block_size == MiB                 # two levels up
    assert mkfile(ns, "f").block_size == 4 * MiB                       # the store's default
    ns.set_policy("/kv/sub", Policy(replicas=3))                       # nearer, without a block size
    assert mkfile(ns, "g", deep.ino).block_size == 4 * MiB
    shared = ns.create(ROOT_INO, "shared", FileType.DIRECTORY, 0o2775, gid=7)
    assert ns.create(shared.ino, "f", FileType.REGULAR, 0o644, gid=9).gid == 7
    sub = ns.create(shared.ino, "d", FileType.DIRECTORY, 0o755, gid=9)
    assert (sub.gid, sub.mode & stat.S_ISGID) == (7, stat.S_ISGID)
    twice = mkfile(ns, "twice")
    ns.link(twice.ino, kv.ino, "other")
    mkfile(ns, "new")
    assert ns.rename(ROOT_INO, "new", ROOT_INO, "twice") == RenameResult(twice.ino, 1)
    assert ns.getattr(twice.ino).nlink == 1 and ns.lookup(kv.ino, "other").ino == twice.ino
    assert ns.rename(kv.ino, "other", deep.ino, "moved") == RenameResult()
    kept = mkfile(ns, "open")
    mkfile(ns, "over")
    assert ns.rename(ROOT_INO, "over", ROOT_INO, "open", keep_orphan=True, keeper="s1") == RenameResult(kept.ino, 0)
    assert (kept.ino, "s1") in ns.kept_orphans() and ns.getattr(kept.ino).nlink == 0
    ns.release_orphan(kept.ino)
    with pytest.raises(NotFound):
        ns.getattr(kept.ino)
    link = ns.create(ROOT_INO, "link", FileType.SYMLINK, 0o777, symlink_target="kv/sub")
    assert link.size == len("kv/sub") and ns.readlink(link.ino) == "kv/sub"
    assert ns.unlink(ROOT_INO, "link") == UnlinkResult(link.ino, 0)


def test_an_unlinked_file_waits_out_its_grace(tmp_path: pathlib.Path, clock: FakeClock, meta_engine: str) -> None:
    ns = open_store(tmp_path, clock, unlink_grace_ms=1000)
    try:
        f = mkfile(ns, "f")
        assert ns.unlink(ROOT_INO, "f") == UnlinkResult(f.ino, 0)
        with pytest.raises(NotFound):
            ns.getattr(f.ino)                       # gone for every call, its blocks kept for readers
        assert ns.expire_orphans() == 0
        clock.ns += 2_000_000_000
        assert ns.expire_orphans() == 1
        assert ns.check() == []
    finally:
        ns.close()
