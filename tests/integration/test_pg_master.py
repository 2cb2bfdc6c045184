"""A real master process on `--meta postgresql://...` with workers and clients: files written,
read, the master restarted, everything intact; PostgreSQL itself restarted under a create loop
(calls fail within their deadline with UNAVAILABLE meanwhile, the master reconnects by itself,
every acknowledged create is there, fsck clean); a wrong password or an unreachable server stop the
master at start with a clear message and without the password."""
from __future__ import annotations

import pathlib
import threading
import time

from curvine_py.core.errors import CurvineError, Unavailable
from tests import pgserver
from tests.harness import Cluster, random_bytes, wait_until
from tests.integration.test_cli import cli

MiB = 1 << 20



def test_a_master_on_postgresql_serves_files_across_its_restart(tmp_path: pathlib.Path,
                                                                pg: pgserver.PgServer) -> None:
    url = pg.url("serve")
    with Cluster(tmp_path, workers=2, master_args=["--meta", url]) as cluster:
        client = cluster.client()
        fs = client.fs
        fs.mkdir("/d/e", parents=True)
        files = {f"/d/e/f{i}": random_bytes(MiB * (i % 3) + 1000 * i + 1, seed=i) for i in range(8)}
        for path, data in files.items():
            with fs.open(path, "wb") as f:
                f.write(data)
        fs.rename("/d/e/f0", "/d/moved")
        files["/d/moved"] = files.pop("/d/e/f0")
        client.master.setxattr(fs.stat("/d/moved").ino, "user.k", b"\x00v")
        assert not (tmp_path / "master" / "meta.db").exists()          # nothing went to SQLite
        assert pg.psql("SELECT value FROM meta WHERE key='leader_address'", "serve").strip() == \
            cluster.master_address
        # A second master on the same database stands by (tests/integration/test_standby_masters.py).
        cluster.restart_master()                                        # kill -9, same port
        client2 = cluster.client()
        cluster.wait_for_live_workers(2)
        for path, data in files.items():
            with client2.fs.open(path, "rb") as f:
                assert f.read() == data, path
        assert client2.master.getxattr(client2.fs.stat("/d/moved").ino, "user.k") == b"\x00v"
        assert list(client2.master.fsck().problems) == []


def test_postgresql_restarted_under_a_create_loop(tmp_path: pathlib.Path, pg: pgserver.PgServer) -> None:
    url = pg.url("restart")
    with Cluster(tmp_path, workers=1, master_args=["--meta", url]) as cluster:
        client = cluster.client(rpc_timeout_s=3.0)
        client.fs.mkdir("/loop")
        acknowledged: list[str] = []
        failures: list[tuple[float, BaseException]] = []
        stop = threading.Event()

        def creates() -> None:
            i = 0
            while not stop.is_set():
                path = f"/loop/f{i}"
                started = time.monotonic()
                try:
                    client.fs.mkdir(path)
                    acknowledged.append(path)
                except CurvineError as exc:
                    failures.append((time.monotonic() - started, exc))
                    if "exists" in str(exc).lower():   # the create was committed, its reply lost
                        acknowledged.append(path)
                    time.sleep(0.05)
                i += 1

        reader = cluster.client()                       # the default 5 s deadline
        reads: list[int] = []
        read_failures: list[tuple[float, BaseException]] = []

        def stats() -> None:                            # served by the reader pool, not the writer
            while not stop.is_set():
                started = time.monotonic()
                try:
                    reader.fs.stat("/loop")
                    reads.append(1)
                except CurvineError as exc:
                    read_failures.append((time.monotonic() - started, exc))
                    time.sleep(0.05)

        loops = [threading.Thread(target=creates), threading.Thread(target=stats)]
        for loop in loops:
            loop.start()
        try:
            wait_until(lambda: len(acknowledged) >= 20, 20, "creates before the restart")
            pg.restart(down_s=2.0)
            before, read_before = len(acknowledged), len(reads)
            wait_until(lambda: len(acknowledged) >= before + 20 and len(reads) >= read_before + 20, 30,
                       "creates and reads after the restart")
        finally:
            stop.set()
            for loop in loops:
                loop.join()
        assert read_failures, "no read met the restart"
        assert all(elapsed < 6.0 and isinstance(exc, Unavailable) for elapsed, exc in read_failures), \
            read_failures
        assert cluster.master is not None and cluster.master.alive()      # reconnected by itself
        # Meanwhile calls failed, each within its deadline (3 s, plus the channel's slack), with
        # UNAVAILABLE: never a hang, never an internal error.
        assert failures, "the restart went unnoticed: nothing measured"
        assert all(elapsed < 6.0 for elapsed, _ in failures), failures
        assert all(isinstance(exc, Unavailable) or "exists" in str(exc).lower() for _, exc in failures), failures
        names = {e.path for e in client.fs.ls("/loop")}
        assert set(acknowledged) <= names
        assert list(client.master.fsck().problems) == []


def test_a_wrong_password_stops_the_master_without_showing_it(tmp_path: pathlib.Path,
                                                               pg: pgserver.PgServer) -> None:
    pg.url("auth")
    secret = "not-the-password-42"
    password_file = tmp_path / "pw"
    password_file.write_text(secret + "\n")
    result = cli("master", "--data-dir", str(tmp_path / "m"), "--port", "0",
                 "--meta", f"postgresql://{pgserver.USER}@127.0.0.1:{pg.port}/auth",
                 "--meta-password-file", str(password_file))
    assert result.returncode == 2
    assert b"password authentication failed" in result.stderr, result.stderr
    assert secret.encode() not in result.stderr and secret.encode() not in result.stdout
    in_url = cli("master", "--data-dir", str(tmp_path / "m"), "--port", "0",
                 "--meta", f"postgresql://{pgserver.USER}:{secret}@127.0.0.1:{pg.port}/auth")
    assert in_url.returncode == 2 and secret.encode() not in in_url.stderr
    assert f"{pgserver.USER}:***@127.0.0.1".encode() in in_url.stderr


def test_an_unreachable_server_stops_the_master_in_bounded_time(tmp_path: pathlib.Path) -> None:
    # 192.0.2.1 (TEST-NET-1) routes nowhere: only connect_timeout ends the attempt.
    started = time.monotonic()
    result = cli("master", "--data-dir", str(tmp_path / "m"), "--port", "0",
                 "--meta", "postgresql://u:pw@192.0.2.1:5432/db")
    assert result.returncode == 2
    assert b"cannot connect to the metadata database postgresql://u:***@192.0.2.1:5432/db" in result.stderr, \
        result.stderr
    assert time.monotonic() - started < 30
