"""Directory leases: a mount that is creating many names in one directory may answer lookups of
absent names there by itself, without asking the master (the kernel sends LOOKUP before every
CREATE, and that miss would otherwise cost a round trip per create).

The promise a lease makes to its holder (a client session): no other session adds a name to the
directory (create, mkdir, mknod, symlink, link, rename into it) while the lease lives. The holder
received every name of the directory with the grant and adds its own new names itself, so "not in
my set" means "absent". Other sessions never see a difference: a name-adding call from another
session first *recalls* the lease and waits until the holder has released it (it learns of the
recall at its next renewal, every term/4) or its term has run out (a dead holder), and only then
runs. The holder stops answering from the lease before it releases it, and stops at the end of the
term by its own clock, counted from when it sent the request (so it always stops first).

Races: grants and the re-check of every name-adding call (`check`) both run on the store thread,
so a lease granted while a caller waited is found and recalled again before that call adds a name.

Cost control: a directory recalled once is not leased again for a cool-down that doubles with
each recall, and a directory where another session added a name recently is not leased at all
(directories shared by several writers, such as LMCache's cache directory, stay lease-free).
Leases live in memory only; a restarted master whose predecessor granted leases (a durable marker)
holds name-adding calls back for one term (`grace_s`), until every old lease has run out.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from curvine_py.core.errors import CurvineError, Timeout

MAX_TRACKED = 65_536          # directories remembered for cool-downs and recent writers
FIRST_COOL_DOWN_S = 30.0
MAX_COOL_DOWN_S = 600.0


class LeaseBusy(CurvineError):
    """A lease was granted after the caller's recall: recall again (internal, never on the wire)."""


@dataclass(slots=True)
class _Lease:
    session: str
    expires: float
    recalled: bool = False


class DirLeases:
    def __init__(self, term_s: float, *, grace_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.term_s = term_s
        self._clock = clock
        self._cond = threading.Condition()
        self._leases: dict[int, _Lease] = {}
        self._cool: OrderedDict[int, tuple[float, float]] = OrderedDict()      # dir -> (until, length)
        # dir -> (last session to add a name, when, shared until): for may_grant
        self._recent: OrderedDict[int, tuple[str, float, float]] = OrderedDict()
        self._grace_until = clock() + grace_s

    @property
    def enabled(self) -> bool:
        return self.term_s > 0

    def now(self) -> float:
        """The leases' clock (deadlines given to recall_and_wait are on it)."""
        return self._clock()

    # -- store thread ---------------------------------------------------------------------------
    def may_grant(self, directory: int, session: str) -> bool:
        now = self._clock()
        with self._cond:
            if self._live_foreign(directory, session, now) is not None:
                return False
            cool = self._cool.get(directory)
            if cool is not None and cool[0] > now:
                return False
            recent = self._recent.get(directory)
            if recent is None:
                return True
            writer, when, shared_until = recent
            return now >= shared_until and (writer == session or now - when >= FIRST_COOL_DOWN_S)

    def grant(self, directory: int, session: str) -> None:
        now = self._clock()
        with self._cond:
            # Leases of holders that died are otherwise only forgotten when someone writes there.
            for expired in [d for d, lease in self._leases.items() if lease.expires <= now]:
                del self._leases[expired]
            self._leases[directory] = _Lease(session, now + self.term_s)

    def check(self, directory: int, session: str) -> None:
        """Before a name is added to `directory` by `session`: raises LeaseBusy while another
        session holds a live lease on it; notes the writer (for may_grant)."""
        now = self._clock()
        with self._cond:
            if self._live_foreign(directory, session, now) is not None:
                raise LeaseBusy(f"directory {directory} is leased")
            previous = self._recent.get(directory)
            shared_until = previous[2] if previous is not None else 0.0
            if previous is not None and previous[0] != session and now - previous[1] < FIRST_COOL_DOWN_S:
                shared_until = now + FIRST_COOL_DOWN_S    # two writers lately: a shared directory
            self._remember(self._recent, directory, (session, now, shared_until))

    # -- handler threads ------------------------------------------------------------------------
    def recall_and_wait(self, directory: int, session: str, deadline: float) -> None:
        """Returns once no other session holds a live lease on `directory` (and the start-up grace
        is over); raises Timeout at `deadline`. Woken early by a release."""
        with self._cond:
            while (until := self._recall_step(directory, session, deadline)) is not None:
                self._cond.wait(max(0.0, until - self._clock()))

    def poll_recall(self, directory: int, session: str, deadline: float) -> float | None:
        """One look of recall_and_wait, without waiting: None when a name may be added now, else
        the clock time to look again (the lease's end, the grace's end or the deadline). Recalls
        the lease; raises Timeout at `deadline`."""
        with self._cond:
            return self._recall_step(directory, session, deadline)

    def _recall_step(self, directory: int, session: str, deadline: float) -> float | None:
        now = self._clock()
        lease = self._live_foreign(directory, session, now)
        if lease is None and now >= self._grace_until:
            return None
        if now >= deadline:
            raise Timeout(f"directory {directory}: its lease was not given back in time")
        if lease is not None and not lease.recalled:
            lease.recalled = True
            self._start_cool_down(directory, now)
        until = lease.expires if lease is not None else self._grace_until
        return min(until, deadline)

    def renew(self, session: str, directories: list[int]) -> list[int]:
        """Extends the session's live, unrecalled leases by a term; returns them. A directory not
        returned is lost to the holder (recalled, expired or unknown): it must stop using it."""
        now = self._clock()
        kept = []
        with self._cond:
            for directory in directories:
                lease = self._leases.get(directory)
                if lease is not None and lease.session == session and not lease.recalled and lease.expires > now:
                    lease.expires = now + self.term_s
                    kept.append(directory)
        return kept

    def release(self, session: str, directories: list[int]) -> None:
        with self._cond:
            for directory in directories:
                lease = self._leases.get(directory)
                if lease is not None and lease.session == session:
                    del self._leases[directory]
            self._cond.notify_all()

    def grace_over(self) -> bool:
        return self._clock() >= self._grace_until

    def held(self) -> int:
        now = self._clock()
        with self._cond:
            return sum(1 for lease in self._leases.values() if lease.expires > now)

    # -- internals ------------------------------------------------------------------------------
    def _live_foreign(self, directory: int, session: str, now: float) -> _Lease | None:
        """Another session's live lease on `directory` (lock held); an expired one is forgotten."""
        lease = self._leases.get(directory)
        if lease is None or lease.session == session:
            return None
        if lease.expires <= now:
            del self._leases[directory]
            return None
        return lease

    def _start_cool_down(self, directory: int, now: float) -> None:
        previous = self._cool.get(directory)
        length = FIRST_COOL_DOWN_S if previous is None else min(previous[1] * 2, MAX_COOL_DOWN_S)
        self._remember(self._cool, directory, (now + length, length))

    @staticmethod
    def _remember(table: OrderedDict, directory: int, value: tuple) -> None:  # type: ignore[type-arg]
        table[directory] = value
        table.move_to_end(directory)
        while len(table) > MAX_TRACKED:
            table.popitem(last=False)
