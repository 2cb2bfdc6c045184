"""Moving a payload and computing its chunk digests in one pass, both ways.

Why: every read is verified against the per-1 MiB chunk digests the worker stored at write time.
Hashing a 32 MiB object after the whole of it has arrived reads it back from main memory (it no
longer fits in the CPU caches): ~3 ms of xxh3 added serially after the receive. Filling the buffer
one chunk at a time and hashing each chunk right after it lands, while it is still in cache, does
the same verification for a fraction of that (same-run A/B on 14-32 MiB objects: TCP get
+10-30%, short-circuit get up to +35%). The bytes verified are exactly the same and nothing is returned
before every digest is in.

Sending (a PUT with a digest trailer, frames.py): the digests used to travel in the request header,
so the client hashed the whole object before its first byte could go out, a serial pre-pass that
read it from main memory once more. Now each chunk is hashed right before it is sent (the send
then reads it from cache) and the digests follow the payload as a trailer.

A large payload from a socket is hashed on a helper thread instead, a group of chunks at a time
(xxhash and recv_into both release the GIL) when the peer is another host: the receiving thread
is then the client's bottleneck (the kernel's copy, then the hash, one after the other) and this
host's other core is free, so it hashes group g while group g+1 arrives (bench notes:datapath,
tenth pass: a 32 MiB get across a veth link 12-15% faster, at ~10% more client CPU). Not from a
loopback peer: the sending worker then needs a core of this host too, and the helper made 14-32
MiB gets 12-20% slower there. One chunk per hand-off was measured before and gained nothing: a
hand-off costs about what hashing 1 MiB does. The helper takes one payload at a time, and only
while no other large one is being received (a batch's connections hash inline: the cores are
busy already); reads from a file are hashed inline too (short-circuit: the copy and the hash are
both memory-bound).
Nothing is returned before every digest is in, and the helper is done with the caller's buffer
before the call returns or raises.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

from curvine_py.core import layout

CHUNK = layout.CHUNK_SIZE
checksum = layout.checksum


def fill_and_digest(view: memoryview, read_into: Callable[[memoryview, int], None]) -> list[int]:
    """Fills `view` by calling `read_into(piece, offset)` for consecutive pieces of at most CHUNK
    bytes (each call must fill its piece completely) and returns the chunk digests of `view`
    (what `layout.chunk_digests(view)` would return afterwards)."""
    digests = []
    for start in range(0, len(view), CHUNK):
        piece = view[start:start + CHUNK]
        read_into(piece, start)
        digests.append(layout.checksum(piece))
    return digests


log = logging.getLogger(__name__)

# Payloads from this size on are hashed on the helper thread, GROUP bytes per hand-off.
OFFLOAD_MIN = 8 * CHUNK
GROUP = 4 * CHUNK
NO_DIGEST = -1   # what the helper records for a chunk it could not hash (xxh3 digests are unsigned)


class _Hasher:
    """One daemon thread hashing groups of whole chunks for one payload at a time, used only by a
    payload that starts while no other large one is being received: with several at once (a
    batch's connections) the cores are busy already and hand-offs would only add work."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Fresh state. Also in a forked child (os.register_at_fork below): the child has no helper
        thread, and any of these locks may have been held by a thread of the parent at the fork."""
        self._free = threading.Lock()        # held by the payload that uses the helper
        self._receiving = 0                  # large payloads being received, helper or not
        self._counting = threading.Lock()
        self._jobs: queue.SimpleQueue[tuple[memoryview, list[int]] | threading.Event] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._started = threading.Lock()

    def enter(self) -> bool:
        """Counts a large payload in (`leave` counts it out); True when it is the only one."""
        with self._counting:
            self._receiving += 1
            return self._receiving == 1

    def leave(self) -> None:
        with self._counting:
            self._receiving -= 1

    def claim(self) -> bool:
        """True when this caller now owns the helper (release with `finish`)."""
        if not self._free.acquire(blocking=False):
            return False
        if self._thread is None:
            with self._started:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="curvine-digests", daemon=True)
                    self._thread.start()
        return True

    def hash_group(self, group: memoryview, into: list[int]) -> None:
        self._jobs.put((group, into))

    def finish(self) -> None:
        """Waits until every group handed over is hashed, then frees the helper."""
        drained = threading.Event()
        self._jobs.put(drained)
        drained.wait()
        self._free.release()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if isinstance(job, threading.Event):
                job.set()
                continue
            group, into = job
            starts = range(0, len(group), CHUNK)
            try:
                hashed = [checksum(group[start:start + CHUNK]) for start in starts]
            except Exception:   # the helper must live on, or its waiters hang
                log.exception("hashing a received payload failed")
                hashed = [NO_DIGEST] * len(starts)   # matches no stored digest: the read fails
            into.extend(hashed)


_HASHER = _Hasher()
os.register_at_fork(after_in_child=_HASHER.reset)   # serving stacks fork workers (multiprocessing)


def receive_and_digest(view: memoryview, read_into: Callable[[memoryview], None], *,
                       aside: bool = False) -> list[int]:
    """`fill_and_digest` for a reader that needs no offset (a socket's read-ahead): one call per
    chunk fewer on the per-request path. An object of one chunk, the common small get, is one
    read and one hash; with `aside` (a peer on another host), one of OFFLOAD_MIN or more is hashed
    on the helper when no other large payload is being received."""
    if 0 < len(view) <= CHUNK:
        read_into(view)
        return [checksum(view)]
    if aside and len(view) >= OFFLOAD_MIN:
        alone = _HASHER.enter()
        try:
            if alone and _HASHER.claim():
                return _receive_hashing_aside(view, read_into)
            return _receive_inline(view, read_into)
        finally:
            _HASHER.leave()
    return _receive_inline(view, read_into)


def _receive_inline(view: memoryview, read_into: Callable[[memoryview], None]) -> list[int]:
    digests = []
    for start in range(0, len(view), CHUNK):
        piece = view[start:start + CHUNK]
        read_into(piece)
        digests.append(checksum(piece))
    return digests


def _receive_hashing_aside(view: memoryview, read_into: Callable[[memoryview], None]) -> list[int]:
    """Receives GROUP bytes at a time, chunk by chunk, and hands each group to the helper, which
    appends its digests in order (it runs the groups one after another)."""
    digests: list[int] = []
    try:
        for start in range(0, len(view), GROUP):
            group = view[start:start + GROUP]
            for offset in range(0, len(group), CHUNK):
                read_into(group[offset:offset + CHUNK])
            _HASHER.hash_group(group, digests)
    finally:
        _HASHER.finish()   # also on a failed receive: the helper must be done with `view`
    return digests


def send_and_digest(view: memoryview, send: Callable[[memoryview], None]) -> list[int]:
    """Sends `view` by calling `send(piece)` for consecutive pieces of at most CHUNK bytes, each
    hashed just before it goes, and returns the chunk digests of `view`."""
    digests = []
    for start in range(0, len(view), CHUNK):
        piece = view[start:start + CHUNK]
        digests.append(layout.checksum(piece))
        send(piece)
    return digests
