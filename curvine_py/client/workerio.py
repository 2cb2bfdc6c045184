"""Requests to one worker, by the fastest path: short-circuit fd passing when the worker runs on
this node, pooled TCP otherwise. Every payload read is verified against its chunk digests before
it is returned; a mismatch is reported to the worker (which drops its copy) and raised as Corrupt.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from curvine_py.client.dataconn import ConnectionPool, Reply
from curvine_py.client.membership import WorkerAddress
from curvine_py.client.shortcircuit import ShortCircuitClient
from curvine_py.config import ClientConfig
from curvine_py.core import frames, layout
from curvine_py.core.errors import Busy, Corrupt, CurvineError, Unavailable
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.rpc.tls import client_context, tls_files

log = logging.getLogger(__name__)


def verify(payload: memoryview, reply: DataHeader, *, whole: bool, digests: list[int] | None = None) -> bool:
    """True when the bytes match the digests the worker stored at write time. `digests` are the
    payload's chunk digests when already computed as it was received (client/digests.py)."""
    if digests is None:
        digests = layout.chunk_digests(payload)
    if reply.chunk_checksums != digests:   # (a repeated field compares with a list as a sequence)
        return False
    return not whole or layout.combine(digests) == reply.checksum


class WorkerIO:
    def __init__(self, config: ClientConfig, node: str) -> None:
        self._config = config
        self.node = node
        files = tls_files(config)
        self.pool = ConnectionPool(token=config.token, timeout_s=config.data_timeout_s,
                                   max_payload=config.max_payload, per_worker=config.connections_per_worker,
                                   tls=client_context(files) if files.enabled else None)
        self._local: dict[str, ShortCircuitClient] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self.pool.close()
        with self._lock:
            for client in self._local.values():
                client.close()
            self._local.clear()

    def is_local(self, worker: WorkerAddress) -> bool:
        return (self._config.short_circuit and bool(worker.unix_socket) and worker.node == self.node
                and os.path.exists(worker.unix_socket))

    def _short_circuit(self, worker: WorkerAddress) -> ShortCircuitClient:
        with self._lock:
            client = self._local.get(worker.unix_socket)
            if client is None:
                client = ShortCircuitClient(worker.unix_socket, token=self._config.token,
                                            timeout_s=self._config.data_timeout_s)
                self._local[worker.unix_socket] = client
            return client

    def call(self, worker: WorkerAddress, op: frames.Op, header: DataHeader,
             payload: bytes | bytearray | memoryview | None = None, out: memoryview | None = None,
             *, digest: bool = False, deadline_s: float | None = None) -> Reply:
        """One TCP request; a pooled connection that turns out dead (the worker restarted) is
        replaced once by a fresh one before the error is believed. `digest`: see
        WorkerConnection.request. `deadline_s`: the whole call (connect and retry included) gives
        up after this long with Timeout; None: only the bulk data timeout bounds each wait."""
        return Reply(*self._exchange(worker, op, header, payload, out, digest,
                                     None if deadline_s is None else time.monotonic() + deadline_s))

    def _exchange(self, worker: WorkerAddress, op: frames.Op, header: DataHeader,
                  payload: bytes | bytearray | memoryview | None, out: memoryview | None, digest: bool,
                  deadline: float | None) -> tuple[DataHeader, memoryview | None, list[int] | None]:
        """`call` as WorkerConnection.exchange's tuple, by an absolute deadline."""
        pool = self.pool
        for attempt in (1, 2):
            try:
                conn = pool.acquire(worker.host, worker.port, deadline)
                try:
                    answer = conn.exchange(op, header, payload, out, digest, deadline)
                except BaseException as exc:
                    pool.release(conn, exc)
                    raise
                pool.release(conn)
                return answer
            except Busy:
                raise      # it answered: a fresh connection would only cost it another fd
            except Unavailable:
                pool.drop(worker.host, worker.port)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def read(self, worker: WorkerAddress, op: frames.Op, header: DataHeader,
             out: memoryview | None = None, *, whole: bool,
             deadline_s: float | None = None) -> tuple[DataHeader, memoryview | None]:
        """GET or READ_BLOCK with verification. Returns (reply, bytes) or (reply, None) on a miss.
        `deadline_s`: see `call` (a local worker's unix socket is not bounded by it)."""
        if worker.node == self.node and self.is_local(worker):
            try:
                reply, data, digests = self._short_circuit(worker).read(op, header, out, digest=True)
            except Unavailable as exc:
                log.info("short-circuit to %s failed (%s), using TCP", worker.worker_id, exc)
            else:
                return reply, self._checked(worker, op, header, reply, data, whole, digests)
        reply, data, digests = self._exchange(worker, op, header, None, out, True,
                                              None if deadline_s is None else time.monotonic() + deadline_s)
        # verify() written out: the digests match (the common case) costs one combine here.
        if data is not None and (digests is None or reply.chunk_checksums != digests
                                 or whole and layout.combine(digests) != reply.checksum):
            self._checked(worker, op, header, reply, data, whole, digests)   # raises Corrupt
        return reply, data

    def read_many(self, worker: WorkerAddress, op: frames.Op, headers: list[DataHeader],
                  outs: list[memoryview | None], *, whole: bool,
                  deadline_s: float | None = None) -> list[tuple[DataHeader, memoryview | None] | CurvineError]:
        """`read` of several objects of one worker, pipelined on one TCP connection (a local worker:
        one after another over its unix socket). Each result is (reply, bytes or None on a miss)
        or that request's error (Corrupt for bytes that fail verification); a transport failure
        raises for the whole batch. `deadline_s` bounds the connect and the wait for each reply."""
        if worker.node == self.node and self.is_local(worker):
            results: list[tuple[DataHeader, memoryview | None] | CurvineError] = []
            for header, out in zip(headers, outs, strict=True):
                try:
                    results.append(self.read(worker, op, header, out, whole=whole, deadline_s=deadline_s))
                except CurvineError as exc:
                    results.append(exc)
            return results
        deadline = None if deadline_s is None else time.monotonic() + deadline_s
        with self.pool.connection(worker.host, worker.port, deadline) as conn:
            answers = conn.request_many(op, headers, outs, each_s=deadline_s)
        checked: list[tuple[DataHeader, memoryview | None] | CurvineError] = []
        for header, answer in zip(headers, answers, strict=True):
            if isinstance(answer, CurvineError):
                checked.append(answer)
                continue
            try:
                checked.append((answer.header, self._checked(worker, op, header, answer.header, answer.payload,
                                                              whole, answer.digests)))
            except Corrupt as exc:
                checked.append(exc)
        return checked

    def _checked(self, worker: WorkerAddress, op: frames.Op, request: DataHeader, reply: DataHeader,
                 data: memoryview | None, whole: bool, digests: list[int] | None = None) -> memoryview | None:
        if data is None or verify(data, reply, whole=whole, digests=digests):
            return data
        what = request.key or f"block {request.block_id:x}"
        log.error("checksum mismatch for %s from worker %s: reported, copy dropped", what, worker.worker_id)
        try:
            self.call(worker, frames.Op.REPORT_BAD, DataHeader(key=request.key, block_id=request.block_id,
                                                               checksum=request.checksum))
        except CurvineError as exc:
            log.warning("could not report bad copy of %s: %s", what, exc)
        raise Corrupt(f"checksum mismatch for {what} on worker {worker.worker_id}")
