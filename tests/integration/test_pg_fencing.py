"""Leadership fencing on PostgreSQL (store/pgengine.py), with two engines on one real database: the
second is refused with NotLeader naming the first's address; it takes over once the first closes or
once the first's writer session is killed (pg_terminate_backend); a master whose session died and
whose place was taken meanwhile never writes again (NotLeader, lost_leadership set), while one
whose session merely broke, with nobody taking over, reconnects and goes on."""
from __future__ import annotations

import psycopg
import pytest

from curvine_py.core.errors import NotLeader, Unavailable
from curvine_py.master.engine.open import open_namespace
from curvine_py.master.engine.url import parse_meta_url
from curvine_py.master.namespace import Namespace
from curvine_py.master.types import ROOT_INO, FileType
from tests import pgserver


def _open(url: str, advertise: str) -> Namespace:
    return open_namespace(parse_meta_url(url), advertise=advertise)


def _kill_writer(pg: pgserver.PgServer, ns: Namespace) -> None:
    pid = ns._db.conn.info.backend_pid
    # With a timeout the call returns once the backend has exited, so its farewell (FATAL: terminating
    # connection) is in this session's socket: the session died while idle, not during the next call
    # (a call racing the kill fails Unavailable, as documented, and only the one after reconnects).
    assert pg.psql(f"SELECT pg_terminate_backend({pid}, 10000)").strip() == "t"


def test_a_second_engine_is_refused_with_the_leaders_address_until_the_first_closes(
        pg: pgserver.PgServer) -> None:
    url = pg.url("fence1")
    first = _open(url, "10.0.0.1:8995")
    first.mkdir(ROOT_INO, "by-first")
    with pytest.raises(NotLeader) as refused:
        _open(url, "10.0.0.2:8995")
    assert refused.value.leader == "10.0.0.1:8995" and "10.0.0.1:8995" in refused.value.message
    assert isinstance(refused.value, Unavailable)            # what a follower answers: UNAVAILABLE
    first.close()                                           # releases the lock with its session
    second = _open(url, "10.0.0.2:8995")
    try:
        assert second.lookup(ROOT_INO, "by-first").type == FileType.DIRECTORY
        second.mkdir(ROOT_INO, "by-second")
        with pytest.raises(NotLeader) as again:
            _open(url, "10.0.0.3:8995")
        assert again.value.leader == "10.0.0.2:8995"
        assert second.check() == []
    finally:
        second.close()


def test_a_killed_leader_session_lets_another_take_over_and_never_writes_again(pg: pgserver.PgServer) -> None:
    url = pg.url("fence2")
    first = _open(url, "10.0.0.1:8995")
    lost: list[bool] = []
    assert first.engine is not None
    first.engine.on_lost_leadership(lambda: lost.append(True))
    first.mkdir(ROOT_INO, "a")
    _kill_writer(pg, first)
    second = _open(url, "10.0.0.2:8995")                    # the lock went with the killed session
    try:
        with pytest.raises(NotLeader) as refused:
            first.mkdir(ROOT_INO, "late")                   # reconnects, finds the lock taken
        assert refused.value.leader in ("", "10.0.0.2:8995")
        assert first.engine.lost_leadership.is_set() and lost == [True]
        with pytest.raises(NotLeader):                      # and stays fenced, without asking again
            first.mkdir(ROOT_INO, "later")
        second.mkdir(ROOT_INO, "b")
        names = [e.name for e in second.readdir(ROOT_INO)[0]]
        assert names == ["a", "b"]
    finally:
        first.close()
        second.close()


def test_a_leader_that_lost_its_term_meanwhile_is_fenced_even_with_the_lock_free(pg: pgserver.PgServer) -> None:
    url = pg.url("fence3")
    first = _open(url, "10.0.0.1:8995")
    first.mkdir(ROOT_INO, "a")
    _kill_writer(pg, first)
    second = _open(url, "10.0.0.2:8995")                    # led, wrote, and went away
    second.mkdir(ROOT_INO, "b")
    second.close()
    try:
        with pytest.raises(NotLeader):    # the lock is free again, but its in-memory state is stale
            first.mkdir(ROOT_INO, "stale")
    finally:
        first.close()
    with psycopg.connect(url) as raw:
        assert raw.execute("SELECT COUNT(*) FROM dentries WHERE name='stale'").fetchone() == (0,)


def test_a_broken_session_with_nobody_taking_over_reconnects_and_goes_on(pg: pgserver.PgServer) -> None:
    url = pg.url("fence4")
    first = _open(url, "10.0.0.1:8995")
    try:
        first.mkdir(ROOT_INO, "a")
        _kill_writer(pg, first)
        first.mkdir(ROOT_INO, "b")                          # reconnected, re-took the lock, same term
        assert first.engine is not None and not first.engine.lost_leadership.is_set()
        with pytest.raises(NotLeader):
            _open(url, "10.0.0.2:8995")
        assert [e.name for e in first.readdir(ROOT_INO)[0]] == ["a", "b"]
    finally:
        first.close()
