"""Real clusters for tests and benchmarks: a master and N workers as separate processes on
loopback (ports bound as 0 and read from each ready line), each with its own data dirs.

    with Cluster(tmp_path, workers=3) as cluster:
        client = cluster.client()
        cluster.kill_worker(0); cluster.restart_worker(0)

`host=` binds the master and every worker to that address instead (e.g. tests/netns.py's
`lab.root_address`, so processes in other network namespaces reach them); a non-loopback address
needs a token (or `--insecure` in the role args).
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Self

from curvine_py.client import CurvineClient
from curvine_py.procs import RoleProcess, curvine_command, start

# Shorter timers than production, so tests see expiry and freeing within seconds.
FAST_TIMERS = ["--lease-ms", "2000", "--heartbeat-ms", "300", "--unlink-grace-ms", "3000",
               "--session-timeout-ms", "3000"]


class Cluster:
    def __init__(self, root: pathlib.Path, *, workers: int = 1, token: str = "",
                 capacity: str = "", master_args: Sequence[str] = (), worker_args: Sequence[str] = (),
                 node_names: Sequence[str] | None = None, echo: bool = False, host: str = "") -> None:
        self.root = pathlib.Path(root)
        self.host = host
        self.token = token
        self.capacity = capacity
        self._master_args = [*FAST_TIMERS, *master_args]
        self._worker_args = list(worker_args)
        self._node_names = list(node_names) if node_names else [f"node{i}" for i in range(workers)]
        self._echo = echo
        self.master: RoleProcess | None = None
        self.workers: list[RoleProcess | None] = [None] * workers
        self._clients: list[CurvineClient] = []

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> Self:
        try:
            self.start_master()
            for index in range(len(self.workers)):
                self.start_worker(index)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for client in self._clients:
            client.close()
        for worker in self.workers:
            if worker:
                worker.stop()
        if self.master:
            self.master.stop()

    def _token_args(self) -> list[str]:
        return ["--token", self.token] if self.token else []

    def _host_args(self) -> list[str]:
        return ["--host", self.host] if self.host else []

    def start_master(self, port: int = 0) -> RoleProcess:
        port = port or (int(self.master.address.rsplit(":", 1)[1]) if self.master else 0)
        self.master = start("master", curvine_command(
            "master", "--data-dir", str(self.root / "master"), "--port", str(port), *self._host_args(),
            *self._token_args(), *self._master_args), ready_prefix="master=", echo=self._echo)
        return self.master

    def worker_dir(self, index: int) -> pathlib.Path:
        return self.root / f"worker{index}"

    def start_worker(self, index: int, port: int = 0, extra: Sequence[str] = ()) -> RoleProcess:
        assert self.master is not None
        data_dir = self.worker_dir(index)
        data_dir.mkdir(parents=True, exist_ok=True)
        spec = f"{data_dir}:{self.capacity}" if self.capacity else str(data_dir)
        worker = start(f"worker{index}", curvine_command(
            "worker", "--master", self.master.address, "--data-dir", spec, "--port", str(port),
            "--node", self._node_names[index], *self._host_args(), *self._token_args(), *self._worker_args,
            *extra),
            ready_prefix="worker=", echo=self._echo)
        self.workers[index] = worker
        return worker

    def kill_worker(self, index: int) -> None:
        worker = self.workers[index]
        assert worker is not None
        worker.kill()

    def restart_worker(self, index: int) -> RoleProcess:
        """Restarts on the same data dir and the same port (clients keep their addresses)."""
        old = self.workers[index]
        port = int(old.address.rsplit(":", 1)[1]) if old else 0
        if old:
            old.kill()
        return self.start_worker(index, port)

    def kill_master(self) -> None:
        assert self.master is not None
        self.master.kill()

    def restart_master(self) -> RoleProcess:
        assert self.master is not None
        self.master.kill()
        return self.start_master()

    # -- access ------------------------------------------------------------------------------
    @property
    def master_address(self) -> str:
        assert self.master is not None
        return self.master.address

    def worker_id(self, index: int) -> str:
        worker = self.workers[index]
        assert worker is not None
        return worker.field("id")

    def client(self, **overrides: Any) -> CurvineClient:
        settings: dict[str, Any] = {"token": self.token, "membership_refresh_s": 0.5, "node": "test-client"}
        settings.update(overrides)
        client = CurvineClient(self.master_address, **settings)
        self._clients.append(client)
        return client

    def wait_for_live_workers(self, count: int, timeout: float = 15.0) -> None:
        client = self.client()
        wait_until(lambda: sum(w.live for w in client.master.membership().workers) == count, timeout,
                   f"{count} live workers")


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    """Polls `condition` until true; fails the test with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def random_bytes(size: int, seed: int = 0) -> bytes:
    """Deterministic incompressible bytes (fast: os.urandom would do, but a seed makes failures repeatable)."""
    import random
    return random.Random(seed).randbytes(size) if size < (64 << 20) else os.urandom(size)


@contextlib.contextmanager
def small_disk_cluster(root: pathlib.Path) -> Iterator[Cluster]:
    """One worker whose data dir is a 10 MiB tmpfs that claims 1 GiB of capacity, and a `durable`
    directory /durable with 4 MiB blocks: the worker finds out the disk is full only when a write
    fails (issue 11's repro of a failed multi-block write)."""
    from curvine_py.core.domain import Policy, StorageClass
    mount_point = root / "worker0"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=10m", "tmpfs", str(mount_point)], check=True)
    try:
        with Cluster(root, workers=1, capacity="1GiB") as cluster:
            client = cluster.client()
            client.fs.mkdir("/durable")
            client.fs.set_policy("/durable", Policy(storage_class=StorageClass.DURABLE, block_size=4 * (1 << 20)))
            yield cluster
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
