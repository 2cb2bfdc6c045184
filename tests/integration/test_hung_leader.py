"""A hung leader (issue 24): three real processes on one real PostgreSQL, a worker, a long-lived
client and a FUSE mount, both given the list of masters. SIGSTOP of the leader: its session stays
open (its kernel still answers TCP), but its leader lease runs out, a standby ends that session,
takes over, and the same client and the same mount create again within 10 s (target 5 s). No
acknowledged write is lost and fsck is clean. The old leader, continued (SIGCONT), writes nothing
(the database is byte for byte what it was) and steps down with exit code 3."""
from __future__ import annotations

import os
import pathlib
import signal
import threading
import time

import psycopg

from curvine_py.client import CurvineClient
from curvine_py.master.standby import EXIT_LOST_LEADERSHIP
from curvine_py.procs import RoleProcess, curvine_command, start
from tests import pgserver
from tests.fuse.mounts import Mount
from tests.integration.ha_loops import Loop, start_loops
from tests.harness import FAST_TIMERS, wait_until

BOUND_S = 10.0       # the requirement: create again within 10 s of the SIGSTOP
LEASE_MS = "2000"


def start_master(root: pathlib.Path, name: str, url: str, *, ready: str) -> RoleProcess:
    return start(name, curvine_command("master", "--data-dir", str(root / name), "--port", "0", "--meta", url,
                                       "--leader-lease-ms", LEASE_MS, *FAST_TIMERS), ready_prefix=ready)


def database_digest(url: str) -> dict[str, str]:
    """Every table's rows, digested: equal digests = nothing was written."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1")]
        return {table: str(conn.execute(
            f'SELECT count(*), md5(coalesce(string_agg(t::text, \'|\' ORDER BY t::text), \'\')) FROM "{table}" t'
        ).fetchone()) for table in tables}


def test_stopped_leader_is_replaced_and_followed_and_writes_nothing_when_continued(
        tmp_path: pathlib.Path, pg: pgserver.PgServer) -> None:
    url = pg.url("hung")
    first = start_master(tmp_path, "a", url, ready="master=")
    second = start_master(tmp_path, "b", url, ready="standby=")
    third = start_master(tmp_path, "c", url, ready="standby=")
    masters = f"{first.address},{second.address},{third.address}"
    (tmp_path / "w0").mkdir()
    worker = start("worker0", curvine_command("worker", "--master", masters, "--data-dir", str(tmp_path / "w0"),
                                              "--port", "0", "--node", "node0"), ready_prefix="worker=")
    mount = Mount(masters, tmp_path / "mnt", args=["--node", "node0"])
    client = CurvineClient(masters, node="node0", rpc_timeout_s=3.0, membership_refresh_s=0.5)
    stop = threading.Event()
    loops = (Loop("client"), Loop("mount"))
    stopped = False
    try:
        wait_until(lambda: sum(w.live for w in client.master.membership().workers) == 1, 20, "the worker")
        client.fs.mkdir("/hung")
        with mount:
            threads = start_loops(client, mount.path, "/hung", loops, stop)
            try:
                wait_until(lambda: all(len(loop.acked_at) >= 10 for loop in loops), 60, "writes before the stop")
                os.kill(first.process.pid, signal.SIGSTOP)
                stopped = True
                stopped_at = time.monotonic()
                wait_until(lambda: all(loop.first_ack_after(stopped_at) is not None for loop in loops), 30,
                           "writes after the stop")
                time.sleep(1.0)            # a few more writes through the new leader
            finally:
                stop.set()
                for thread in threads:
                    thread.join()
            recovered = {loop.name: loop.first_ack_after(stopped_at) for loop in loops}
            print(f"first acknowledged write after SIGSTOP: {recovered}")
            for loop in loops:
                assert loop.wrong == [], (loop.name, loop.wrong)
                took = recovered[loop.name]
                assert took is not None and took < BOUND_S, (loop.name, took, loop.failures[-5:])
            new = next(p for p in (second, third) if any(line.startswith("master=") for line in p.tail))
            # Every acknowledged write is there with its bytes, read through a fresh client that
            # knows only the new leader; fsck is clean.
            fresh = CurvineClient(new.address)
            try:
                for loop in loops:
                    for path, data in loop.acknowledged.items():
                        with fresh.fs.open(path, "rb") as f:
                            assert f.read() == data, path
                assert list(fresh.master.fsck().problems) == []
                # The worker followed and the new leader kept it.
                assert sum(w.live for w in fresh.master.membership().workers) == 1
            finally:
                fresh.close()
        # The old leader, continued with nobody else leading any more, writes nothing and steps down.
        for process in (second, third):
            process.stop()
        before = database_digest(url)
        os.kill(first.process.pid, signal.SIGCONT)
        stopped = False
        assert first.process.wait(15) == EXIT_LOST_LEADERSHIP
        assert database_digest(url) == before
    finally:
        stop.set()
        if stopped:
            os.kill(first.process.pid, signal.SIGCONT)
        client.close()
        worker.stop()
        first.kill()
        second.stop()
        third.stop()
