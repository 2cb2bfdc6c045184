"""Directory leases against a real master process, with two client sessions (A and B, each a
MasterClient: its session id rides on every call). B holds a lease on a directory; A's calls that
add a name there wait until B gives the lease back or its term runs out, and never fail because of
it. Also: who gets a lease, what the grant lists, the restart grace, the report's count."""
from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from curvine_py.client.master import MasterClient
from curvine_py.core.domain import FileType, NewNode
from curvine_py.core.errors import NotFound
from tests.harness import Cluster

TERM_MS = 1000


@pytest.fixture()
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    with Cluster(tmp_path / "c", workers=0, master_args=["--dir-lease-ms", str(TERM_MS)]) as running:
        yield running


def _sessions(cluster: Cluster) -> tuple[MasterClient, MasterClient]:
    a, b = MasterClient(cluster.master_address), MasterClient(cluster.master_address)
    assert a.session != b.session
    return a, b


def _mkdir(client: MasterClient, name: str) -> int:
    return client.create(NewNode(1, name, FileType.DIRECTORY, 0o755)).ino


def _file(parent: int, name: str) -> NewNode:
    return NewNode(parent, name, FileType.REGULAR, 0o644, exclusive=False)


def test_a_create_waits_for_the_holder_to_give_the_lease_back(cluster: Cluster) -> None:
    a, b = _sessions(cluster)
    directory = _mkdir(b, "d")
    b.create(_file(directory, "mine"))
    grant = b.acquire_dir_lease(directory)
    assert grant.granted and grant.term_ms == TERM_MS
    assert list(grant.names) == ["mine"], "the grant lists every name"
    assert b.report().dir_leases == 1
    b.create(_file(directory, "mine-too"))      # the holder's own creates do not wait
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(a.create, _file(directory, "theirs"))
        deadline = time.monotonic() + 10
        while list(b.renew_dir_leases([directory]).kept) == [directory]:
            assert time.monotonic() < deadline, "A's create never recalled B's lease"
            time.sleep(0.01)
        # B learns of the recall at its renewal; A has not created anything meanwhile
        with pytest.raises(NotFound):
            b.lookup(directory, "theirs")
        b.release_dir_leases([directory])
        attr = pending.result(timeout=10)
    assert attr.ino
    assert b.lookup(directory, "theirs").ino == attr.ino
    assert b.report().dir_leases == 0
    assert not b.acquire_dir_lease(directory).granted, "recalled: not leased again soon"


def test_a_silent_holder_delays_others_by_at_most_its_term(cluster: Cluster) -> None:
    a, b = _sessions(cluster)
    directory = _mkdir(b, "d")
    assert b.acquire_dir_lease(directory).granted
    # The deadline contract: B never answers, A's link still goes through (the master gives the
    # lease up after its term; when exactly is tested with a fake clock in tests/unit).
    a.link(a.create(_file(1, "elsewhere")).ino, directory, "linked-in")   # link adds a name too
    assert list(b.renew_dir_leases([directory]).kept) == [], "the lease is gone"


def test_rename_into_a_leased_directory_recalls_the_lease(cluster: Cluster) -> None:
    a, b = _sessions(cluster)
    directory = _mkdir(b, "d")
    a.create(_file(1, "moving"))
    time.sleep(0.01)
    assert b.acquire_dir_lease(directory).granted
    a.rename(1, "moving", directory, "moved")
    assert list(b.renew_dir_leases([directory]).kept) == [], "the name went in only once B's lease was gone"
    assert b.lookup(directory, "moved").type == FileType.REGULAR


def test_directories_with_other_writers_or_no_session_are_not_leased(cluster: Cluster) -> None:
    a, b = _sessions(cluster)
    shared = _mkdir(b, "shared")
    a.create(_file(shared, "from-a"))
    assert not b.acquire_dir_lease(shared).granted, "A added a name there just now"
    assert a.acquire_dir_lease(shared).granted, "A's own names do not count against A"
    a.release_dir_leases([shared])
    anonymous = MasterClient(cluster.master_address)
    anonymous._metadata = ()          # an old client that sends no session
    try:
        assert not anonymous.acquire_dir_lease(shared).granted
    finally:
        anonymous.close()


def test_a_restarted_master_waits_out_its_predecessors_leases(cluster: Cluster) -> None:
    _, b = _sessions(cluster)
    directory = _mkdir(b, "d")
    assert b.acquire_dir_lease(directory).granted
    cluster.restart_master()            # kill -9: the leases die with it, B does not know yet
    a2 = MasterClient(cluster.master_address)
    try:
        started = time.monotonic()
        a2.create(_file(directory, "after-restart"))
        assert time.monotonic() - started >= 0.5, "held back for the old term"
        assert a2.report().dir_leases == 0
        time.sleep(1.5)                 # the new master clears the marker once the grace is over
        cluster.restart_master()
        a3 = MasterClient(cluster.master_address)
        started = time.monotonic()
        a3.create(_file(directory, "second-restart"))
        assert time.monotonic() - started < TERM_MS / 1000, "no leases were granted since: no grace"
        a3.close()
    finally:
        a2.close()
