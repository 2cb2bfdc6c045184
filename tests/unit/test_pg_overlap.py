"""PostgreSQL group commit with the COMMIT left in flight (Database.batch(then=...), store/pgconn.py):
the next batch's one-statement calls travel behind it, the batch before is told its outcome before
anything of the next one is read or committed, and nothing is acknowledged before its COMMIT was
answered. Failure paths on a real server: the session killed with a COMMIT in flight and a batch
sent behind it, a statement failing in the batch in flight, a COMMIT that fails or is answered
with ROLLBACK; and the store thread overlapping batches under concurrent creates."""
from __future__ import annotations

import select
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from curvine_py.core.errors import CurvineError, Unavailable
from curvine_py.master.engine.open import open_namespace
from curvine_py.master.engine.url import parse_meta_url
from curvine_py.master.namespace import Namespace
from curvine_py.master.storethread import StoreThread
from curvine_py.master.types import ROOT_INO, Attr, FileType
from tests import pgserver
from tests.harness import wait_until
from tests.unit.test_master_support import mkfile

Told = list[tuple[str, CurvineError | None]]


@pytest.fixture
def store(pg: pgserver.PgServer, request: pytest.FixtureRequest) -> Iterator[Namespace]:
    ns = open_namespace(parse_meta_url(pg.url(f"ov_{request.node.name[5:40]}")))
    try:
        mkfile(ns, "before")
        yield ns
    finally:
        ns.close()


def names(ns: Namespace) -> list[str]:
    return [e.name for e in ns.readdir(ROOT_INO)[0]]


def teller(told: Told, label: str) -> Callable[[CurvineError | None], None]:
    return lambda error: told.append((label, error))


def raw(pg: pgserver.PgServer, ns: Namespace, *statements: str) -> None:
    """SQL on the store's database behind its back (a trigger: a failure the functions cannot foresee)."""
    database = ns._db.conn.info.dbname
    with psycopg.connect(pg.url(database, create=False), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[call-overload]


def boom(pg: pgserver.PgServer, ns: Namespace, delay_s: float = 0) -> None:
    """Creating the name `boom` fails on the server (in production: a full disk, a bug)."""
    raw(pg, ns, "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.name = 'boom' THEN PERFORM pg_sleep({delay_s}); RAISE EXCEPTION 'injected failure'; "
                "END IF; RETURN NEW; END $$",
        "CREATE TRIGGER boom BEFORE INSERT ON dentries FOR EACH ROW EXECUTE FUNCTION boom()")


def test_the_batch_behind_a_commit_in_flight_is_told_after_it(store: Namespace) -> None:
    told: Told = []
    with store.batch(2, deferring=True, then=teller(told, "first")):
        a, b = mkfile(store, "a"), mkfile(store, "b")
    assert told == []                      # its COMMIT is in flight: nobody may answer yet
    with store.batch(2, deferring=True, then=teller(told, "second")):
        c = mkfile(store, "c")             # sent behind that COMMIT, without waiting (it may take in
        listed = names(store)              # the COMMIT's answer); a read settles the batch before first
        assert told == [("first", None)]
    assert told == [("first", None)]       # the second COMMIT is in flight now
    store.settle()
    assert told == [("first", None), ("second", None)]
    assert store._db.overlapped == 1
    assert listed == ["a", "b", "before", "c"]      # the read saw the first batch, committed
    inos = [store.lookup(ROOT_INO, n).ino for n in ("a", "b", "c")]
    assert [x.ino for x in (a, b, c)] == inos      # each call got its own answer
    assert names(store) == ["a", "b", "before", "c"]
    assert store.check() == []


def test_a_transaction_that_does_not_overlap_waits_for_the_commit_in_flight(store: Namespace) -> None:
    told: Told = []
    with store.batch(2, deferring=True, then=teller(told, "batch")):
        mkfile(store, "a")
    store.unlink(ROOT_INO, "before")       # a transaction of its own (no `then`): settles first
    assert told == [("batch", None)]
    assert store._db.overlapped == 0
    assert names(store) == ["a"]


def test_a_session_killed_with_a_commit_in_flight_fails_it_and_the_batch_behind(
        pg: pgserver.PgServer, store: Namespace) -> None:
    # The COMMIT of a batch holding `slow` sleeps on the server (a deferred trigger fires at COMMIT).
    raw(pg, store, "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                   "IF NEW.name = 'slow' THEN PERFORM pg_sleep(60); END IF; RETURN NULL; END $$",
        "CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON dentries DEFERRABLE INITIALLY DEFERRED "
        "FOR EACH ROW EXECUTE FUNCTION slow()")
    pid = store._db.conn.info.backend_pid
    told: Told = []
    with store.batch(2, deferring=True, then=teller(told, "first")):
        mkfile(store, "slow")
        mkfile(store, "a")
    wait_until(lambda: pg.psql(f"SELECT wait_event FROM pg_stat_activity WHERE pid = {pid}").strip() == "PgSleep",
               10, "the writer's backend sleeping inside the COMMIT")
    with pytest.raises(Unavailable), store.batch(2, deferring=True, then=teller(told, "second")):
        mkfile(store, "b")                 # sent behind the COMMIT in flight
        assert pg.psql(f"SELECT pg_terminate_backend({pid}, 10000)").strip() == "t"
    # The first batch's COMMIT never answered: it fails (not acknowledged); the second raised.
    assert [(label, type(error)) for label, error in told] == [("first", Unavailable)]
    mkfile(store, "after")                 # the next transaction reconnects
    assert names(store) == ["after", "before"]     # nothing of either batch is there
    assert store.check() == []


def test_a_statement_failing_in_the_batch_in_flight_fails_the_batch_behind_it_too(
        pg: pgserver.PgServer, store: Namespace) -> None:
    boom(pg, store, delay_s=1)             # slow to fail: its error arrives with the COMMIT in flight
    told: Told = []
    with store.batch(3, deferring=True, then=teller(told, "first")):
        mkfile(store, "a")
        mkfile(store, "boom")
        mkfile(store, "c")
    with pytest.raises(CurvineError, match="the batch before this one failed"), \
            store.batch(2, deferring=True, then=teller(told, "second")):
        mkfile(store, "d")                 # no Sync between the batches: it ran in the failed pipeline
    assert len(told) == 1 and told[0][0] == "first"
    assert isinstance(told[0][1], CurvineError) and "metadata commit failed" in told[0][1].message
    assert names(store) == ["before"]      # none of either batch is durable
    with store.batch(2, deferring=True, then=teller(told, "third")):
        mkfile(store, "e")
    store.settle()
    assert told[1:] == [("third", None)]   # and the next one works
    assert names(store) == ["before", "e"]
    assert store.check() == []


def test_a_commit_that_fails_on_the_server_fails_its_batch_and_the_one_behind(
        pg: pgserver.PgServer, store: Namespace) -> None:
    # The COMMIT itself fails (a deferred trigger raising at COMMIT): the server ends that
    # transaction and skips what was sent behind it, BEGIN included; what comes after must not
    # run outside a transaction.
    raw(pg, store, "CREATE FUNCTION late() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                   "IF NEW.name = 'late' THEN RAISE EXCEPTION 'injected commit failure'; END IF; RETURN NULL; END $$",
        "CREATE CONSTRAINT TRIGGER late AFTER INSERT ON dentries DEFERRABLE INITIALLY DEFERRED "
        "FOR EACH ROW EXECUTE FUNCTION late()")
    told: Told = []
    with store.batch(2, deferring=True, then=teller(told, "first")):
        mkfile(store, "late")
        mkfile(store, "a")
    # The server answered up to that COMMIT (its Flush): the next send takes the COMMIT's error in.
    assert select.select([store._db.conn.fileno()], [], [], 10)[0]
    outcomes: list[object] = []
    with pytest.raises(CurvineError, match="metadata commit failed"), \
            store.batch(2, deferring=True, then=teller(told, "second")):
        mkfile(store, "b")                 # behind the COMMIT: skipped with it
        try:                               # a call that reads its answer: settles first, then fails
            outcomes.append(store.rename(ROOT_INO, "before", ROOT_INO, "renamed"))
        except CurvineError as exc:
            outcomes.append(exc)
    assert [label for label, _ in told] == ["first"] and isinstance(told[0][1], CurvineError)
    assert isinstance(outcomes[0], CurvineError)
    assert names(store) == ["before"]      # not `renamed`: nothing ran outside a transaction
    mkfile(store, "after")
    assert names(store) == ["after", "before"]
    assert store.check() == []


def test_a_commit_answered_with_rollback_fails_its_batch_alone(pg: pgserver.PgServer, store: Namespace) -> None:
    boom(pg, store)
    told: Told = []
    with store.batch(3, deferring=True, then=teller(told, "first")):
        mkfile(store, "boom")
        with pytest.raises(psycopg.Error):   # a Sync (as a general-path call's RELEASE sends) ends the
            store._db.sync()                 # failed pipeline: the transaction stays aborted, and its
                                             # COMMIT is answered ROLLBACK
    assert told == []
    store.settle()
    assert len(told) == 1 and isinstance(told[0][1], CurvineError) and "ROLLBACK" in told[0][1].message
    with store.batch(2, deferring=True, then=teller(told, "second")):
        mkfile(store, "a")                 # the session is usable again (rolled back, not doomed)
    store.settle()
    assert told[1:] == [("second", None)]
    assert names(store) == ["a", "before"]


def test_the_store_thread_overlaps_batches_and_acknowledges_only_durable_creates(store: Namespace) -> None:
    thread = StoreThread(store)
    thread.start()
    made: list[tuple[str, Attr]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def creator(worker: int) -> None:
        for i in range(400):
            if stop.is_set():
                return
            name = f"w{worker}-{i}"
            attr = thread.call(store.create, ROOT_INO, name, FileType.REGULAR, 0o644)
            with lock:
                made.append((name, attr))

    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(creator, w) for w in range(8)]
            wait_until(lambda: store._db.overlapped > 0 or all(f.done() for f in futures), 120,
                       "a batch begun behind a COMMIT in flight")
            stop.set()
            for f in futures:
                f.result(timeout=60)
    finally:
        thread.stop()
    assert store._db.overlapped > 0        # batches did go behind a COMMIT in flight
    assert thread._unsettled == 0          # and every one was told
    for name, attr in made:                # every acknowledged create is durable, with its own inode
        assert store.lookup(ROOT_INO, name).ino == attr.ino
    assert len({attr.ino for _, attr in made}) == len(made) > 0
    assert store.check() == []


def test_a_store_thread_without_overlap_waits_for_every_commit(store: Namespace) -> None:
    # bench/meta_overlap.py's baseline: the same concurrent creates, no batch behind a COMMIT in flight.
    thread = StoreThread(store, overlap=False)
    thread.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            made = list(pool.map(lambda i: (f"n{i}", thread.call(store.create, ROOT_INO, f"n{i}",
                                                                FileType.REGULAR, 0o644)), range(200)))
    finally:
        thread.stop()
    assert thread.calls == 200 and thread.batches < 200    # batches of several: they could have overlapped
    assert store._db.overlapped == 0
    assert thread._unsettled == 0
    for name, attr in made:
        assert store.lookup(ROOT_INO, name).ino == attr.ino
    assert store.check() == []


def test_a_batch_is_told_failed_when_reading_its_outcome_fails_unexpectedly(
        store: Namespace, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error settle does not expect while waiting for the COMMIT (a bug, say) still tells the
    batch, as failed: never as durable, never not at all (a batch never told would keep the store
    thread settling it forever)."""
    told: Told = []
    with store.batch(2, deferring=True, then=teller(told, "first")):
        mkfile(store, "a")
    assert told == []
    writer = store._db

    def broken_wait(*_: object) -> bool:
        raise RuntimeError("unexpected")

    monkeypatch.setattr(writer, "_answered", lambda _inflight: False)
    monkeypatch.setattr(writer, "_await", broken_wait)
    monkeypatch.setattr(writer, "_leave_pipeline", broken_wait)
    with pytest.raises(RuntimeError, match="unexpected"):
        store.settle()
    assert [label for label, _ in told] == ["first"]
    error = told[0][1]
    assert isinstance(error, CurvineError) and "could not be read" in str(error)
