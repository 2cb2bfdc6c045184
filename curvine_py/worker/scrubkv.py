"""One page of the SCRUB_KV op (`fsck --scrub` over KV objects): the worker walks its own KV
objects in stored-name order after a cursor and verifies each with `scrub.scrub()` (the check of
the background Scrubber), paced at the asked rate, until a byte budget is spent. Why a page: the
walk of a full disk takes minutes, while one request must answer within the client's data timeout;
the cursor lets the caller resume, and a name stored or dropped meanwhile never derails it.

KV objects are not in the master's records, so only the worker can name them; a corrupt copy is
dropped here (never served again: a get misses) and its key returned, so the operator sees which.
"""
from __future__ import annotations

import bisect
import time
from collections.abc import Callable

from curvine_py.core.frames import KvScrubPage
from curvine_py.worker.datadir import OBJECTS
from curvine_py.worker.scrub import Pacer, Stopped, Verdict, scrub
from curvine_py.worker.store import Store
from curvine_py.worker.throttle import Monotonic

PREFIX = f"{OBJECTS}/"
DEFAULT_BUDGET = 256 * 1024 * 1024   # a request that asks for no budget: about a second of reads
# The reply lists the corrupt keys in one frame header (frames.MAX_HEADER = 64 KiB): a page ends
# early once its list is this big, and the next page goes on from there.
MAX_CORRUPT_BYTES = 32 * 1024


def unreadable(name: str) -> str:
    """What names a corrupt copy whose header (and so its key) is unreadable."""
    return f"<unreadable header: {name}>"


def scrub_page(store: Store, after: str, *, budget: int, rate: int, clock: Monotonic = time.monotonic,
               sleep: Callable[[float], bool] | None = None) -> KvScrubPage:
    """Verifies the KV objects whose stored names sort after `after` ("" = from the start), at
    `rate` bytes/s (0 = unlimited), until `budget` bytes (0 = DEFAULT_BUDGET) have been read."""
    if budget < 0 or rate < 0:
        raise ValueError("scrub budget and rate must be >= 0")
    budget = budget or DEFAULT_BUDGET
    names = sorted(name for name, _ in store.names() if name.startswith(PREFIX))
    pace = Pacer(rate, clock, sleep or _never_stopped)
    cursor, done, objects, corrupt, listed = after, False, 0, list[str](), 0
    for name in names[bisect.bisect_right(names, after):]:
        if pace.done >= budget or listed >= MAX_CORRUPT_BYTES:
            break
        try:
            result = scrub(store, name, pace)
        except Stopped:
            break
        cursor = name
        if result.verdict is Verdict.ABSENT:
            continue          # evicted or deleted since the listing
        objects += 1
        if result.verdict is Verdict.CORRUPT:
            label = result.key or unreadable(name)
            corrupt.append(label)
            listed += len(label.encode("utf-8")) + 4
    else:
        cursor, done = "", True
    return KvScrubPage(cursor, done, objects, pace.done, tuple(corrupt))


def _never_stopped(seconds: float) -> bool:
    time.sleep(seconds)
    return False
