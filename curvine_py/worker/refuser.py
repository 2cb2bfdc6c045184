"""Answers the connections a server refuses at accept (over a connection cap, out of file
descriptors) with a clear data-plane error frame, from one thread for all of them.

A refused client has already sent, or is about to send, its first request (HELLO): the refuser reads
that request's head, answers it with the error (an EAGAIN `Busy`: the client tries the next replica
or misses at once instead of waiting out its timeout), and closes. Reading the head first means
the reply carries the request's op and id (the client can match it) and the close is a clean FIN.

Resource handling: at most `max_pending` refused sockets are held, each for at most `deadline_s`.
When full, the oldest one goes (closed: its client sees EOF, the same failover without the message)
to make room for the newest, whose client is the likeliest to be waiting for the answer: a flood of
silent sockets cannot keep real clients from being told. The thread sleeps on an event while
nothing is pending.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field

from curvine_py.core import frames
from curvine_py.core.errors import CurvineError
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.worker.throttle import Monotonic

log = logging.getLogger(__name__)

DEFAULT_DEADLINE_S = 2.0
DEFAULT_MAX_PENDING = 128
POLL_S = 0.05


def error_frame(code: int, request_id: int, exc: CurvineError) -> bytes:
    """The error reply to a request with raw op `code` (an unknown op is answered with its own code,
    so the peer can still match the reply)."""
    header = DataHeader(errno=exc.errno, message=exc.message)
    op_code = code & ~frames.RESPONSE_BIT
    try:
        return frames.encode(frames.Op(op_code), request_id, header, response=True)
    except ValueError:
        body = header.SerializeToString()
        return frames.PREFIX.pack(frames.MAGIC, frames.VERSION, (op_code | frames.RESPONSE_BIT) & 0xFF,
                                  request_id, len(body), 0) + body


@dataclass(slots=True)
class _Refused:
    sock: socket.socket
    error: CurvineError
    deadline: float
    head: bytearray = field(default_factory=bytearray)


class Refuser:
    def __init__(self, *, deadline_s: float = DEFAULT_DEADLINE_S, max_pending: int = DEFAULT_MAX_PENDING,
                 clock: Monotonic = time.monotonic) -> None:
        self._deadline_s = deadline_s
        self._max_pending = max_pending
        self._clock = clock
        self._lock = threading.Lock()
        self._incoming: collections.deque[_Refused] = collections.deque()
        self._pending: dict[int, _Refused] = {}
        self._wake = threading.Event()
        self._stopping = False
        self._selector = selectors.DefaultSelector()
        self._thread: threading.Thread | None = None
        self.answered = 0   # refusals answered with an error frame (for tests and logs)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="refuser", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            leftovers = list(self._incoming) + list(self._pending.values())
            self._incoming.clear()
            self._pending.clear()
        for refused in leftovers:
            _close(refused.sock)
        self._selector.close()

    def refuse(self, sock: socket.socket, error: CurvineError) -> None:
        """Takes over a refused connection (it is closed in any case)."""
        overflow: _Refused | None = None
        with self._lock:
            stopping = self._stopping
            if not stopping:
                self._incoming.append(_Refused(sock, error, self._clock() + self._deadline_s))
                overflow = self._incoming.popleft() if len(self._incoming) > self._max_pending else None
        if stopping:
            _close(sock)
            return
        if overflow is not None:
            _close(overflow.sock)
        self._wake.set()

    def _run(self) -> None:
        while not self._stopping:
            self._take_incoming()
            if not self._pending:
                self._wake.wait()
                self._wake.clear()
                continue
            for key, _ in self._selector.select(POLL_S):
                refused = self._pending.get(key.fd)
                if refused is not None:
                    self._read(refused)
            now = self._clock()
            for refused in [r for r in self._pending.values() if r.deadline <= now]:
                self._finish(refused)

    def _take_incoming(self) -> None:
        with self._lock:
            batch = list(self._incoming)
            self._incoming.clear()
        for refused in batch:
            while len(self._pending) >= self._max_pending:   # the oldest makes room (see above)
                self._finish(next(iter(self._pending.values())), answer=False)
            try:
                refused.sock.setblocking(False)
                self._selector.register(refused.sock, selectors.EVENT_READ)
            except (OSError, ValueError):
                _close(refused.sock)
                continue
            self._pending[refused.sock.fileno()] = refused

    def _read(self, refused: _Refused) -> None:
        want = frames.PREFIX_SIZE
        if len(refused.head) >= frames.PREFIX_SIZE:
            want += min(frames.PREFIX.unpack(refused.head[:frames.PREFIX_SIZE])[4], frames.MAX_HEADER)
        try:
            data = refused.sock.recv(want - len(refused.head))
        except BlockingIOError:
            return
        except OSError:
            self._finish(refused, answer=False)
            return
        if not data:
            self._finish(refused, answer=False)
            return
        refused.head += data
        if len(refused.head) < frames.PREFIX_SIZE:
            return
        magic, _, _, _, header_length, _ = frames.PREFIX.unpack(refused.head[:frames.PREFIX_SIZE])
        if magic != frames.MAGIC:
            self._finish(refused, answer=False)   # not our protocol: nothing to answer
        elif len(refused.head) >= frames.PREFIX_SIZE + min(header_length, frames.MAX_HEADER):
            self._finish(refused)

    def _finish(self, refused: _Refused, *, answer: bool = True) -> None:
        self._pending.pop(refused.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(refused.sock)
        if answer and len(refused.head) >= frames.PREFIX_SIZE:
            _, _, code, request_id, _, _ = frames.PREFIX.unpack(refused.head[:frames.PREFIX_SIZE])
            with contextlib.suppress(OSError):
                refused.sock.send(error_frame(code, request_id, refused.error))   # small: fits the buffer
                self.answered += 1
        _close(refused.sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
    with contextlib.suppress(OSError):
        sock.close()
