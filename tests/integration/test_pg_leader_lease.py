"""The leader lease on a real PostgreSQL (store/pgengine.py, master/leaderlease.py), engine by
engine in one process: a standby ends the session of a leader whose lease ran out in the database
and leads; the old leader's next write meets the ended session and it steps down, writing nothing;
a leader whose own clock says its lease ran out sends nothing at all; a `meta load` (no lease) is
never ended; a wrong password is an authentication error, not an unreachable host."""
from __future__ import annotations

import errno
import pathlib
import subprocess
import time

import pytest

from curvine_py.core.errors import NotLeader, Unauthenticated, Unavailable
from curvine_py.master.engine.open import open_namespace
from curvine_py.master.engine.url import parse_meta_url
from curvine_py.master.leaderlease import Lease
from curvine_py.master.namespace import Namespace
from curvine_py.master.types import FileType
from curvine_py.procs import curvine_command
from tests import pgserver
from tests.faketime import FakeTime

LEASE_S = 0.5


def mkdir(ns: Namespace, name: str) -> None:
    ns.create(1, name, FileType.DIRECTORY, 0o755)


def names(ns: Namespace) -> list[str]:
    entries, _more = ns.readdir(1)
    return sorted(entry.name for entry in entries)


def test_a_standby_ends_the_session_of_a_leader_whose_lease_ran_out(pg: pgserver.PgServer) -> None:
    url = parse_meta_url(pg.url("lease_break"))
    time_a = FakeTime()
    old = open_namespace(url, advertise="a:1", lease=Lease(LEASE_S, clock=time_a.clock))
    try:
        mkdir(old, "before")
        # Within its (startup) lease nobody may take over.
        with pytest.raises(NotLeader) as refused:
            open_namespace(url, advertise="b:1", lease=Lease(LEASE_S))
        assert refused.value.leader == "a:1"
        old.renew_leader_lease()                 # now a short lease: LEASE_S from the database's clock
        time.sleep(LEASE_S + 0.3)                # the database's clock cannot be injected
        new = open_namespace(url, advertise="b:1", lease=Lease(LEASE_S))
        try:
            # The old leader, as after SIGCONT with its local clock not advanced (the worst case):
            # its session was ended, its write fails and it steps down; nothing of it is stored.
            with pytest.raises(Unavailable):
                mkdir(old, "after")
            with pytest.raises(NotLeader):
                mkdir(old, "after")
            assert old.engine is not None and old.engine.lost_leadership.is_set()
            mkdir(new, "by-new")
            assert names(new) == ["before", "by-new"]
        finally:
            new.close()
    finally:
        old.close()


def test_a_leader_whose_own_lease_ran_out_sends_nothing(pg: pgserver.PgServer) -> None:
    url = parse_meta_url(pg.url("lease_local"))
    fake = FakeTime()
    ns = open_namespace(url, lease=Lease(LEASE_S, clock=fake.clock))
    try:
        mkdir(ns, "before")
        fake.now += 31                           # past the startup lease, as a stopped process
        with pytest.raises(NotLeader):
            mkdir(ns, "after")
        assert ns.engine is not None and ns.engine.lost_leadership.is_set()
    finally:
        ns.close()
    check = open_namespace(url, lease=Lease(LEASE_S))
    try:
        assert names(check) == ["before"]
    finally:
        check.close()


def test_a_writer_without_a_lease_is_never_ended(pg: pgserver.PgServer) -> None:
    url = parse_meta_url(pg.url("lease_loader"))
    loader = open_namespace(url)                 # what `meta load` opens: no lease
    try:
        mkdir(loader, "loaded")
        time.sleep(0.2)
        with pytest.raises(NotLeader):
            open_namespace(url, lease=Lease(LEASE_S))
        mkdir(loader, "still-loading")
    finally:
        loader.close()


def test_a_wrong_password_is_an_authentication_error(tmp_path: pathlib.Path, pg: pgserver.PgServer) -> None:
    pg.url("lease_auth")
    wrong = parse_meta_url(f"postgresql://{pgserver.USER}:not-it@127.0.0.1:{pg.port}/lease_auth")
    with pytest.raises(Unauthenticated) as refused:
        open_namespace(wrong, lease=Lease(LEASE_S))
    assert refused.value.errno == errno.EACCES and "not-it" not in refused.value.message
    password_file = tmp_path / "pw"
    password_file.write_text("not-it\n")
    done = subprocess.run([*curvine_command("meta", "dump"), "--meta",
                           f"postgresql://{pgserver.USER}@127.0.0.1:{pg.port}/lease_auth",
                           "--meta-password-file", str(password_file), str(tmp_path / "x.dump")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "password authentication failed" in done.stderr and "EHOSTUNREACH" not in done.stderr, done.stderr


def test_a_failed_meta_load_leaves_no_lock_file(tmp_path: pathlib.Path, pg: pgserver.PgServer) -> None:
    data_dir = tmp_path / "load"
    bad = tmp_path / "bad.dump"
    bad.write_bytes(b"not a dump at all")
    done = subprocess.run([*curvine_command("meta", "load"), "--data-dir", str(data_dir), "--meta",
                           pg.url("lease_failed_load"), str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stderr
    assert not (data_dir / "master.lock").exists()
