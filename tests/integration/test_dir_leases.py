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
from curvine_py.proto.curvine.v1 import common_pb2 as cpb
from curvine_py.proto.curvine.v1 import master_pb2 as pb
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
    return client.create(pb.CreateRequest(parent=1, name=name, type=cpb.DIRECTORY, mode=0o755)).ino


def _file(parent: int, name: str) -> pb.CreateRequest:
    return pb.CreateRequest(parent=parent, name=name, type=cpb.REGULAR, mode=0o644)


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
        started = time.monotonic()
        pending = pool.submit(a.create, _file(directory, "theirs"))
        time.sleep(0.3)
        assert not pending.done(), "A's create waits while B holds the lease"
        renewal = b.renew_dir_leases([directory])
        assert list(renewal.kept) == [], "B learns of the recall at its renewal"
        b.release_dir_leases([directory])
        attr = pending.result(timeout=5)
        waited = time.monotonic() - started
    assert attr.ino and waited < TERM_MS / 1000, f"A went ahead when B released ({waited:.2f}s)"
    assert b.lookup(directory, "theirs").ino == attr.ino
    assert b.report().dir_leases == 0
    assert not b.acquire_dir_lease(directory).granted, "recalled: not leased again soon"


def test_a_silent_holder_delays_others_by_at_most_its_term(cluster: Cluster) -> None:
    a, b = _sessions(cluster)
    directory = _mkdir(b, "d")
    assert b.acquire_dir_lease(directory).granted
    started = time.monotonic()
    a.link(a.create(_file(1, "elsewhere")).ino, directory, "linked-in")   # link adds a name too
    waited = time.monotonic() - started
    assert 0.5 <= waited < 3.0, f"waited {waited:.2f}s for a term of {TERM_MS} ms"
    assert list(b.renew_dir_leases([directory]).kept) == [], "the lease is gone"


def test_rename_into_a_leased_directory_recalls_the_lease(cluster: Cluster) -> None:
    a, b = _sessions(cluster)
    directory = _mkdir(b, "d")
    a.create(_file(1, "moving"))
    time.sleep(0.01)
    assert b.acquire_dir_lease(directory).granted
    started = time.monotonic()
    a.rename(1, "moving", directory, "moved")
    assert time.monotonic() - started >= 0.5
    assert b.lookup(directory, "moved").type == cpb.REGULAR


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
        assert time.monotonic() - started < 0.5, "no leases were granted since: no grace"
        a3.close()
    finally:
        a2.close()
