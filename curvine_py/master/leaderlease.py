"""The leader lease of a master on PostgreSQL: a stopped, partitioned or wedged leader
loses the leadership within a bound, and never writes after its lease.

The advisory lock on the writer session (store/pgengine.py) is what makes one master the writer,
but it lives as long as that session, and a SIGSTOPped master's session stays open: its kernel
still answers TCP. So the leader also holds a lease in the database: `meta.leader_lease_until`,
the database clock's epoch milliseconds until which the lease runs, extended on the writer session
every `lease_s / 3` (through the store thread, so a wedged store thread stops renewing too).

- A standby that finds the lock taken and the lease run out ends the holder's session
  (`pg_terminate_backend`): its open transaction is rolled back and the lock freed, and the standby
  takes it (pgengine.py `_lead`). Everything the old leader sends later meets a dead session; its
  reconnect finds another term and it steps down (exit 3).
- The leader fences itself on its own clock: the lease counts from when the renewal was SENT
  (before the database stamped it), so it runs out here no later than in the database. No BEGIN
  and no COMMIT go out after it ran out (Database._immediate asks `check`): the master steps down.
  A continued (SIGCONT) leader therefore writes nothing: its lease ran out locally and its session
  was ended in the database, whichever it meets first.

Time is injected: `Lease` is plain arithmetic over a monotonic clock, `LeaseKeeper.step()` is one
renewal and returns how long to wait, so unit tests drive both with a fake clock.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from curvine_py.core.errors import CurvineError, NotLeader

log = logging.getLogger(__name__)

LEASE_S = 3.0             # default leader lease (--leader-lease-ms)
STARTUP_LEASE_S = 30.0    # what a new leader takes while it builds itself (before the keeper renews)
BREAK_MARGIN_MS = 100     # a standby ends the holder's session this long after its lease ran out
FOREVER = math.inf


class Lease:
    """How long this process may still write as the leader, on its monotonic clock."""

    def __init__(self, lease_s: float = LEASE_S, *, clock: Callable[[], float] = time.monotonic) -> None:
        if lease_s <= 0:
            raise ValueError("the leader lease must be positive")
        self.lease_s = lease_s
        self._clock = clock
        self._lock = threading.Lock()
        self._until = FOREVER      # FOREVER: no lease kept (a `meta load`, or before the first grant)

    @property
    def lease_ms(self) -> int:
        return int(self.lease_s * 1000)

    def now(self) -> float:
        return self._clock()

    def granted(self, sent_at: float, lease_s: float | None = None) -> None:
        """A renewal sent at `sent_at` (this clock) was committed: the lease runs from then."""
        with self._lock:
            self._until = sent_at + (self.lease_s if lease_s is None else lease_s)

    def left_s(self) -> float:
        with self._lock:
            return self._until - self._clock()

    def expired(self) -> bool:
        return self.left_s() <= 0


class LeaseKeeper:
    """Renews the lease every lease/3 and fences the leader once it ran out. `renew()` runs one
    renewal through the store thread (raises NotLeader when another master leads, any other
    CurvineError when the database could not be reached); `fence(reason)` makes the master step
    down (pgengine.PgEngine.fence)."""

    def __init__(self, lease: Lease, renew: Callable[[], None], fence: Callable[[str], object]) -> None:
        self.lease = lease
        self._renew = renew
        self._fence = fence
        self.interval_s = lease.lease_s / 3
        self.failures = 0
        self.fenced = False

    def step(self) -> float:
        """One renewal; the seconds to wait before the next (0 once fenced: nothing more to do)."""
        if self.fenced:
            return 0.0
        if self.lease.expired():
            # Checked before renewing: a renewal that succeeds now would be sent after the lease
            # ran out (a stopped master continued), and a standby may lead meanwhile.
            return self._fenced(f"the leader lease ran out {-self.lease.left_s():.1f} s ago")
        sent = self.lease.now()
        try:
            self._renew()
        except NotLeader as exc:
            return self._fenced(exc.message or "another master leads")
        except CurvineError as exc:
            self.failures += 1
            if self.failures == 1:
                log.warning("leader lease not renewed (%.1f s left): %s", self.lease.left_s(), exc.message)
            if self.lease.expired():
                return self._fenced(f"the leader lease ran out: {exc.message}")
            return min(self.interval_s, max(self.lease.left_s() / 3, 0.05))
        if self.lease.now() - sent >= self.lease.lease_s:
            # Answered too late to count: the lease it granted has run out by now already.
            return self._fenced(f"the leader lease renewal took {self.lease.now() - sent:.1f} s")
        self.lease.granted(sent)
        if self.failures:
            log.info("leader lease renewed again after %d failures", self.failures)
            self.failures = 0
        return self.interval_s

    def _fenced(self, reason: str) -> float:
        self.fenced = True
        log.error("stepping down: %s", reason)
        self._fence(reason)
        return 0.0

    def run(self, stop: threading.Event) -> None:
        delay = 0.0
        while not stop.wait(delay):
            delay = self.step()
            if self.fenced:
                return
