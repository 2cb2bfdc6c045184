"""Membership: RegisterWorker (identity, capacity, full block inventory), then Heartbeat every
`heartbeat_interval_ms` with usage, counts (KV hits and misses included: the data plane's
counters since the worker started, `WorkerState.lookups`), its metrics port (the master keeps it in
memory only, so every beat carries it) and the blocks evicted or found bad since the last beat.

Runs in a background thread with the generated sync stub; every call has a deadline. When the
master is down the worker keeps serving data and retries with capped exponential backoff; block
reports that could not be delivered are kept for the next beat. The master may answer
`reregister` (it lost track of us, e.g. our lease expired): we register again with the inventory.
Blocks the master no longer references (`delete_block_ids`) are deleted locally.

Time is injected: `step()` is one round of the loop and returns how long to wait before the next
(the thread only waits and steps), failures are logged through a throttle on the injected
monotonic `clock` (first failure at once, then at most one line per LOG_INTERVAL_S), and the
backoff jitter comes from an injected `random.Random`, so tests run the loop with a fake clock.
"""
from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from curvine_py.core.errors import NotFound
from curvine_py.proto.curvine.v1 import master_pb2
from curvine_py.proto.curvine.v1.master_pb2_grpc import MasterStub
from curvine_py.rpc.auth import call_metadata
from curvine_py.rpc.channel import master_channel
from curvine_py.rpc.errors import from_rpc_error
from curvine_py.rpc.tls import TlsFiles
from curvine_py.worker.store import Store
from curvine_py.worker.throttle import DEFAULT_INTERVAL_S as LOG_INTERVAL_S
from curvine_py.worker.throttle import LogThrottle, Monotonic
from curvine_py.worker.workerstate import WorkerState

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 5.0
DEFAULT_INTERVAL_MS = 1000
BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 5.0


@dataclass(frozen=True, slots=True)
class Reserve:
    """The disk reserve (--free-space-ratio) summed over the data dirs, for `report`."""
    free_space_ratio: float
    reserve_bytes: int      # kept free on the dirs' file systems
    fs_free_bytes: int      # free on them now (others write there too)


def disk_reserve(store: Store) -> Reserve:
    """Each file system counted once (two dirs on one disk keep one reserve there)."""
    ratio, reserve, free = 0.0, 0, 0
    seen: set[int] = set()
    for data_dir in store.dirs:
        ratio = max(ratio, data_dir.free_space_ratio)
        device = os.stat(data_dir.path).st_dev
        if device in seen:
            continue
        seen.add(device)
        total, available = data_dir.disk()
        reserve += int(total * data_dir.free_space_ratio)
        free += available
    return Reserve(ratio, reserve, free)


@dataclass(frozen=True, slots=True)
class Advertised:
    """How other nodes reach this worker (sent with every registration)."""
    worker_id: str
    host: str
    port: int
    unix_socket: str
    node: str
    lm_port: int = 0
    metrics_port: int = 0   # Prometheus /metrics on `host`, 0 = off


class Heartbeater:
    def __init__(self, store: Store, state: WorkerState, advertised: Advertised, *, master: str, token: str,
                 rpc_timeout_s: float = RPC_TIMEOUT_S, clock: Monotonic = time.monotonic,
                 rng: random.Random | None = None, log_interval_s: float = LOG_INTERVAL_S,
                 tls: TlsFiles | None = None) -> None:
        self._store = store
        self._state = state
        self._advertised = advertised
        self._master = master
        self._metadata = call_metadata(token)
        self._timeout = rpc_timeout_s
        self._channel = master_channel(master, tls)
        self._stub = MasterStub(self._channel)  # type: ignore[no-untyped-call]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.registered = threading.Event()   # set after the first successful registration
        self._needs_register = True
        self.interval_s = DEFAULT_INTERVAL_MS / 1000
        self.cluster_id = ""
        self._throttle = LogThrottle(log_interval_s, clock)
        self._rng = rng or random.Random()
        self.failures = 0   # calls that failed in a row
        self._backoff = BACKOFF_START_S

    def worker_info(self) -> master_pb2.WorkerInfo:
        usage = self._store.usage()
        stats = self._store.stats()
        reserve = disk_reserve(self._store)
        a = self._advertised
        hits, misses = self._state.lookups()
        return master_pb2.WorkerInfo(hits=hits, misses=misses, worker_id=a.worker_id, host=a.host, port=a.port, unix_socket=a.unix_socket,
                                     node=a.node, capacity=usage.capacity, used=usage.used,
                                     metrics_port=a.metrics_port,
                                     available=usage.available, lm_port=a.lm_port, live=True,
                                     blocks=stats.blocks, objects=stats.objects, evictions=stats.evictions,
                                     free_space_ratio=reserve.free_space_ratio,
                                     reserve_bytes=reserve.reserve_bytes, fs_free_bytes=reserve.fs_free_bytes)

    def register(self) -> None:
        """One RegisterWorker call (raises grpc.RpcError)."""
        # Pending reports are superseded by the inventory we send: take them before reading it.
        self._store.take_reports()
        request = master_pb2.RegisterWorkerRequest(info=self.worker_info(), block_ids=self._store.block_ids())
        reply = self._stub.RegisterWorker(request, timeout=self._timeout, metadata=self._metadata)
        self.cluster_id = reply.cluster_id
        self._state.epoch = reply.epoch
        if reply.heartbeat_interval_ms:
            self.interval_s = reply.heartbeat_interval_ms / 1000
        self._apply_deletes(reply.delete_block_ids)
        self._needs_register = False
        log.info("registered with master %s as %s (cluster %s, epoch %d, %d blocks)", self._master,
                 self._advertised.worker_id, reply.cluster_id, reply.epoch, len(request.block_ids))
        self.registered.set()

    def beat(self) -> None:
        """One Heartbeat call (raises grpc.RpcError); undelivered reports are kept."""
        evicted, bad = self._store.take_reports()
        usage = self._store.usage()
        stats = self._store.stats()
        reserve = disk_reserve(self._store)
        hits, misses = self._state.lookups()
        request = master_pb2.HeartbeatRequest(
            hits=hits, misses=misses, metrics_port=self._advertised.metrics_port,
            worker_id=self._advertised.worker_id, capacity=usage.capacity, used=usage.used,
            available=usage.available, evicted_block_ids=evicted, bad_block_ids=bad, blocks=stats.blocks,
            objects=stats.objects, evictions=stats.evictions, free_space_ratio=reserve.free_space_ratio,
            reserve_bytes=reserve.reserve_bytes, fs_free_bytes=reserve.fs_free_bytes)
        try:
            reply = self._stub.Heartbeat(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError:
            self._store.return_reports(evicted, bad)
            raise
        self._state.epoch = reply.epoch
        self._apply_deletes(reply.delete_block_ids)
        if reply.reregister:
            log.info("master %s asks us to register again", self._master)
            self._needs_register = True

    def _apply_deletes(self, block_ids: Sequence[int]) -> None:
        deleted = sum(1 for block_id in block_ids if self._store.delete_block(block_id))
        if block_ids:
            log.info("master released %d blocks, %d were here and are deleted", len(block_ids), deleted)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._timeout + 1)
        self._channel.close()

    def step(self) -> float:
        """One round of the loop: register (when needed) or beat. Returns the seconds to wait
        before the next round: the master's interval, or a jittered, capped exponential backoff
        after a failure (the worker keeps serving data meanwhile)."""
        try:
            if self._needs_register:
                self.register()
            else:
                self.beat()
        except grpc.RpcError as exc:
            error = from_rpc_error(exc)
            if isinstance(error, NotFound):
                self._needs_register = True   # the master does not know this worker
            return self._failed(str(error), with_traceback=False)
        except Exception as exc:  # noqa: BLE001 (the loop outlives any failure; logged with its traceback)
            return self._failed(f"internal error: {exc}", with_traceback=True)
        if self.failures:
            log.info("master %s reachable again after %d failed calls", self._master, self.failures)
            self._throttle.reset("master")
        self.failures, self._backoff = 0, BACKOFF_START_S
        return 0.0 if self._needs_register else self.interval_s

    def _failed(self, error: str, *, with_traceback: bool) -> float:
        self.failures += 1
        suppressed = self._throttle.allow("master")
        if suppressed is not None:
            log.warning("master %s: %s failed (%d in a row, %d similar lines suppressed): %s", self._master,
                        "registration" if self._needs_register else "heartbeat", self.failures, suppressed,
                        error, exc_info=with_traceback)
        # A worker that has a lease to keep retries at least once per heartbeat interval: a restarted
        # master takes it back with a fresh lease, and a longer backoff would let that lease expire
        # (the worker leaves the view and its blocks' reads fail) although it serves all along.
        cap = min(BACKOFF_MAX_S, self.interval_s) if self.registered.is_set() else BACKOFF_MAX_S
        delay = min(self._backoff, cap) * self._rng.uniform(0.5, 1.0)
        self._backoff = min(self._backoff * 2, cap)
        return delay

    def _run(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            delay = self.step()
