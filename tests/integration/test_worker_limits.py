"""Issue 11's fd-exhaustion case on a real worker process under `prlimit`: at a low fd limit, many
idle sockets do not break gets on open connections, new clients get a clear refusal at once
rather than a hang, the worker's log is not flooded; a half-sent header is timed out."""
from __future__ import annotations

import contextlib
import errno
import pathlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence

import pytest

from curvine_py.core import frames
from curvine_py.core.errors import Busy
from curvine_py.procs import curvine_command
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from tests.harness import Cluster
from tests.unit.test_worker_server import WireClient, assert_closed

Op = frames.Op
FD_LIMIT = 256      # auto caps: (256 - 128) / 2 = 64 connections, 32 per peer
IDLE_SOCKETS = 400


class LimitedWorker:
    """A worker started under `prlimit --nofile=N:N`, its stderr (the log) kept in a file."""

    def __init__(self, cluster: Cluster, root: pathlib.Path, extra: Sequence[str]) -> None:
        assert cluster.master is not None
        data_dir = root / "data"
        data_dir.mkdir(parents=True)
        self.log_path = root / "worker.log"
        argv = ["prlimit", f"--nofile={FD_LIMIT}:{FD_LIMIT}", *curvine_command(
            "worker", "--master", cluster.master.address, "--data-dir", str(data_dir), "--port", "0",
            "--node", "limited", *extra)]
        with open(self.log_path, "w") as log_file:
            self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log_file, text=True,
                                            start_new_session=True)
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(self.process.stdout.readline()),  # type: ignore[union-attr]
                                  daemon=True)
        reader.start()
        reader.join(30)
        assert ready and ready[0].startswith("worker="), self.log_path.read_text()[-3000:]
        host, port = ready[0].split()[0].split("=", 1)[1].rsplit(":", 1)
        self.address = (host, int(port))

    def log_lines(self) -> list[str]:
        return self.log_path.read_text().splitlines()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("limits"), workers=0) as c:
        yield c


@contextlib.contextmanager
def limited_worker(cluster: Cluster, root: pathlib.Path, *extra: str) -> Iterator[LimitedWorker]:
    worker = LimitedWorker(cluster, root, extra)
    try:
        yield worker
    finally:
        worker.stop()


def flood(address: tuple[str, int], count: int) -> list[socket.socket]:
    """`count` idle connections (connected, never a byte sent)."""
    idle = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(5)
        with contextlib.suppress(OSError):
            sock.connect(address)
        idle.append(sock)
    return idle


def refusal_of_a_new_client(address: tuple[str, int]) -> tuple[float, str]:
    """(seconds until answered, how): a new client's HELLO is refused with Busy or closed."""
    started = time.monotonic()
    try:
        with WireClient(address, timeout=10) as client:
            return time.monotonic() - started, f"admitted: {client.hello_reply}"
    except Busy as exc:
        return time.monotonic() - started, f"busy: {exc}"
    except (ConnectionError, OSError) as exc:
        return time.monotonic() - started, f"closed: {exc}"


def test_idle_sockets_at_a_low_fd_limit_neither_break_open_connections_nor_hang_new_clients(
        cluster: Cluster, tmp_path: pathlib.Path) -> None:
    with limited_worker(cluster, tmp_path) as worker:
        working = [WireClient(worker.address) for _ in range(4)]
        keys = [f"k{i}" for i in range(100)]          # more than the fd cache keeps open: files are opened
        for index, key in enumerate(keys):
            working[index % 4].put(key, key.encode() * 100)
        idle = flood(worker.address, IDLE_SOCKETS)
        try:
            for client in working:
                for key in keys:
                    reply, data = client.get(key)
                    assert reply.found and data == key.encode() * 100
            elapsed, how = refusal_of_a_new_client(worker.address)
            assert how.startswith("busy: worker busy") and "per peer is 32" in how, how
            assert elapsed < 2.0, how                  # a clear refusal, not a 10 s hang
        finally:
            for sock in idle:
                sock.close()
            for client in working:
                client.close()
        lines = worker.log_lines()
        refusals = [line for line in lines if "refusing a connection" in line]
        assert 1 <= len(refusals) <= 3, refusals       # ~370 refusals, one line per 10 s
        assert len(lines) < 40, lines[-20:]


def test_out_of_fds_without_caps_new_clients_are_answered_and_the_log_is_not_flooded(
        cluster: Cluster, tmp_path: pathlib.Path) -> None:
    with limited_worker(cluster, tmp_path, "--max-connections", "5000", "--max-connections-per-peer",
                        "5000") as worker:
        with WireClient(worker.address) as open_one:
            open_one.put("x", b"x" * 10)
            idle = flood(worker.address, IDLE_SOCKETS)   # more than the fd limit
            try:
                time.sleep(1.0)                           # the accept loop hits EMFILE for a while
                elapsed, how = refusal_of_a_new_client(worker.address)
                assert elapsed < 3.0 and not how.startswith("admitted"), how
                reply, data = open_one.exchange(Op.GET, DataHeader(key="x"))   # needs a file opened
                assert reply.errno == errno.EAGAIN or (reply.found and data == b"x" * 10), reply
            finally:
                for sock in idle:
                    sock.close()
        lines = worker.log_lines()
        fds = [line for line in lines if "file descriptors" in line]
        assert 1 <= len(fds) <= 4, fds                  # not a line every 100 ms
        assert len(lines) < 40, lines[-20:]
        # Recovered: the descriptors are back, new clients are served.
        deadline = time.monotonic() + 10
        while True:
            try:
                with WireClient(worker.address) as again:
                    assert again.call(Op.PING, DataHeader()).errno == 0
                break
            except (Busy, OSError):
                assert time.monotonic() < deadline
                time.sleep(0.1)


def test_a_half_sent_header_is_timed_out_on_the_real_worker(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    with limited_worker(cluster, tmp_path, "--header-timeout-s", "0.5") as worker:
        with socket.create_connection(worker.address) as stuck, WireClient(worker.address) as good:
            stuck.sendall(frames.encode(Op.HELLO, 1, DataHeader(token="t" * 40))[:30])
            assert_closed(stuck)
            assert good.call(Op.PING, DataHeader()).errno == 0
        assert any("no full frame header within 0.5 s" in line for line in worker.log_lines())
