"""fsck --scrub on the master: every recorded copy of a page of blocks re-read and verified by the
worker holding it (data-plane SCRUB, worker/scrub.py), at a bounded rate.

A copy that fails verification is dropped by the worker (never served); the master drops it from
the metadata at once, so the replica counts (and a repair right after) see it without waiting for
the worker's next heartbeat, which reports it bad too (dropping it twice changes nothing). A copy
the worker turns out not to have is dropped from the metadata the same way (missing). Copies on
workers outside the live set are skipped (they do not count as copies); copies on workers that do
not answer are not judged: they are listed as errors.

Pages: one call checks the blocks after a cursor in block id order until PAGE_BLOCKS blocks or
`budget_s` seconds of work, so no RPC runs for long and the caller (cli/fsck.py) loops with the
cursor. Rate: the next copy is asked for only when the bytes verified so far in the page fit
`rate` bytes per second since it started (injected `clock` and `sleep`).
"""
from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from curvine_py.core.cluster import CorruptCopy, ScrubPage
from curvine_py.core.errors import CurvineError
from curvine_py.master.repair import BlockCopier
from curvine_py.master.store.replication import RecordedBlock
from curvine_py.master.types import WorkerInfo

log = logging.getLogger(__name__)

PAGE_BLOCKS = 256
PAGE_BUDGET_S = 5.0
DEFAULT_RATE = 64 << 20      # bytes/s verified across the cluster (cli/fsck.py --scrub-rate)


@dataclass(frozen=True, slots=True)
class BadCopy:
    block_id: int
    ino: int
    worker_id: str
    reason: str


@dataclass(slots=True)
class ScrubbedPage:
    next_after: int
    done: bool = False
    copies: int = 0                  # verified good
    bytes: int = 0
    skipped: int = 0                 # recorded on workers outside the live set: not checked
    corrupt: list[BadCopy] = field(default_factory=list)
    missing: list[BadCopy] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def reported(page: ScrubbedPage, path_of: Callable[[int], str]) -> ScrubPage:
    """The page as fsck is told it: each bad copy with the path of its file instead of the inode."""
    def bad(c: BadCopy) -> CorruptCopy:
        return CorruptCopy(block_id=c.block_id, worker_id=c.worker_id, path=path_of(c.ino), reason=c.reason)
    return ScrubPage(next_after=page.next_after, done=page.done, copies=page.copies, bytes=page.bytes,
                     skipped=page.skipped, corrupt=tuple(bad(c) for c in page.corrupt),
                     missing=tuple(bad(c) for c in page.missing), errors=tuple(page.errors))


def scrub_page(copier: BlockCopier, blocks: list[RecordedBlock], live: dict[str, WorkerInfo], *, after: int,
               rate: int, budget_s: float = PAGE_BUDGET_S, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> ScrubbedPage:
    """Verifies every recorded copy of `blocks` (a page read with `recorded_blocks(after, n)`; fewer
    than asked for means the end). Returns what it found; the caller drops the bad copies."""
    page = ScrubbedPage(next_after=after, done=len(blocks) < PAGE_BLOCKS)
    started = clock()
    verified = 0       # bytes the workers re-read in this page, paced against the rate
    for index, block in enumerate(blocks):
        if index and clock() - started > budget_s:
            page.done = False
            break
        for worker_id in block.holders:
            worker = live.get(worker_id)
            if worker is None:    # a lost worker's copies do not count as copies (replication.py)
                page.skipped += 1
                continue
            ahead = started + verified / rate - clock() if rate else 0.0
            if ahead > 0:
                sleep(ahead)
            try:
                length = copier.verify(block.block_id, worker, block.checksum)
            except CurvineError as exc:
                if exc.errno == errno.EIO:
                    page.corrupt.append(BadCopy(block.block_id, block.ino, worker_id, exc.message))
                    log.error("scrub: block %x on %s failed verification (%s): dropped", block.block_id,
                              worker_id, exc.message)
                    verified += block.length
                else:
                    page.errors.append(f"block {block.block_id:x} on {worker_id}: {exc.message}")
                continue
            if length is None:
                page.missing.append(BadCopy(block.block_id, block.ino, worker_id, "not on the worker"))
                continue
            page.copies += 1
            page.bytes += length
            verified += length
        page.next_after = block.block_id
    return page
