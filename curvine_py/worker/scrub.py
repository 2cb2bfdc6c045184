"""Scrubbing: re-reading stored files and checking every chunk against the digests written with it,
so corruption is found without waiting for a reader (issue 11: "nothing finds corruption without
a read"). Two users: the data-plane SCRUB op (one block or object, for `fsck --scrub`), and the
background `Scrubber` that walks the whole inventory at a bounded rate.

A copy that fails is dropped (never served: a KV get misses, a block read fails over to another
replica) and, for a block, reported bad to the master in the next heartbeat, which re-replicates it
from a good copy. Only the copy that was read is dropped: a block rewritten meanwhile is not
touched (Store.drop_if_current).

Time is injected: `clock` (monotonic seconds) and `sleep` (returns True when told to stop), so
tests drive the rate limit and the passes with a fake clock.
"""
from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from curvine_py.core import layout
from curvine_py.core.errors import Corrupt
from curvine_py.worker.store import Store
from curvine_py.worker.throttle import Monotonic

log = logging.getLogger(__name__)

PASS_PAUSE_S = 60.0   # between two passes, so a small inventory is not re-read in a loop

Pace = Callable[[int], None]   # called with the bytes just read; may wait


class Verdict(enum.Enum):
    ABSENT = "absent"      # nothing stored under that name (or gone meanwhile)
    GOOD = "good"
    CORRUPT = "corrupt"    # failed verification: dropped, and reported if a block


@dataclass(frozen=True, slots=True)
class ScrubResult:
    verdict: Verdict
    length: int = 0
    checksum: int = 0
    reason: str = ""
    key: str = ""          # the KV object's key as its header names it ("" for a block or no header)


def scrub(store: Store, name: str, pace: Pace | None = None, checksum: int = 0) -> ScrubResult:
    """Re-reads and verifies the stored file `name`; drops it if it fails. It fails too when it is
    not what its name says (another block or key: Store.check_copy) or, with `checksum` (the
    master's record of the block, 0 = unknown), when it holds other bytes than those committed."""
    try:
        opened = store.open_entry(name, touch=False)
    except Corrupt as exc:   # the header itself is unreadable
        store.drop_if_current(name, None)
        return ScrubResult(Verdict.CORRUPT, reason=str(exc))
    if opened is None:
        return ScrubResult(Verdict.ABSENT)
    entry, stored = opened
    with stored:
        header = stored.header
        wrong = store.check_copy(name, header, checksum)
        try:
            if wrong is not None:
                raise Corrupt(f"{name} {wrong}")
            stored.verify_summary()
            for index in range(layout.chunk_count(header.length)):
                read = stored.verify_chunk(index)
                if pace is not None:
                    pace(read)
        except (Corrupt, OSError) as exc:
            reason = str(exc)
        else:
            return ScrubResult(Verdict.GOOD, header.length, header.checksum, key=header.key)
    if store.drop_if_current(name, entry) and wrong is not None:
        with store.lock:
            store.mismatched += 1
    log.error("scrub: %s failed verification (%s): dropped", name, reason)
    return ScrubResult(Verdict.CORRUPT, header.length, header.checksum, reason, header.key)


class Pacer:
    """Keeps verification at `rate` bytes per second (0 = unlimited) from its creation on: called
    with the bytes just read, it waits while it is ahead. Raises Stopped when `sleep` says stop.
    The background Scrubber and the SCRUB_KV op (scrubkv.py) pace the same way."""

    def __init__(self, rate: int, clock: Monotonic, sleep: Callable[[float], bool]) -> None:
        self._rate = rate
        self._clock = clock
        self._sleep = sleep
        self._started = clock()
        self.done = 0

    def __call__(self, read: int) -> None:
        self.done += read
        if self._rate:
            ahead = self._started + self.done / self._rate - self._clock()
            if ahead > 0 and self._sleep(ahead):
                raise Stopped


class Stopped(Exception):
    """The pacer's sleep was cut short by a stop."""


@dataclass(slots=True)
class ScrubStats:
    passes: int = 0
    files: int = 0
    bytes: int = 0
    corrupt: int = 0


class Scrubber:
    """Walks the inventory at `rate` bytes per second (0 = off), one pass after another with a
    pause between them. `run_pass()` is one pass (tests call it); `start()`/`stop()` run passes
    in a background thread."""

    def __init__(self, store: Store, *, rate: int, clock: Monotonic = time.monotonic,
                 sleep: Callable[[float], bool] | None = None, pass_pause_s: float = PASS_PAUSE_S) -> None:
        if rate < 0:
            raise ValueError("scrub rate must be >= 0 (0 = off)")
        self._store = store
        self._rate = rate
        self._clock = clock
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._pause_s = pass_pause_s
        self._thread: threading.Thread | None = None
        self.stats = ScrubStats()
        self._stopped = False

    def run_pass(self) -> ScrubStats:
        """One pass over a snapshot of the inventory; returns this pass's counts."""
        this = ScrubStats(passes=1)
        pace = Pacer(self._rate, self._clock, self._sleep)
        try:
            for name, _ in self._store.names():
                if self._stopped:
                    break
                result = scrub(self._store, name, pace)
                if result.verdict is not Verdict.ABSENT:
                    this.files += 1
                if result.verdict is Verdict.CORRUPT:
                    this.corrupt += 1
        except Stopped:
            self._stopped = True
        this.bytes = pace.done
        self.stats.passes += 1
        self.stats.files += this.files
        self.stats.bytes += this.bytes
        self.stats.corrupt += this.corrupt
        log.info("scrub pass: %d files, %d bytes verified, %d corrupt copies dropped", this.files, this.bytes,
                 this.corrupt)
        return this

    def start(self) -> None:
        if not self._rate:
            return
        self._thread = threading.Thread(target=self._run, name="scrubber", daemon=True)
        self._thread.start()
        log.info("scrubbing stored data at %d bytes/s", self._rate)

    def stop(self) -> None:
        self._stopped = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopped:
            try:
                self.run_pass()
            except Exception:
                log.exception("scrub pass failed")
            if self._sleep(self._pause_s):
                return

