"""The mount's directory leases (the master's side and the promise: master/leases.py): while this
mount holds a lease on a directory, a lookup of a name the lease does not list is answered ENOENT
here, without a round trip. That is the LOOKUP the kernel sends before every CREATE, so a mount
creating many files in one directory pays one master call per file instead of two.

What keeps it exact:
- A lease is only asked for after MISSES_TO_LEASE master misses in the directory within a
  window (a directory this mount is filling), and not again soon after a refusal or a loss.
- The grant lists every name; this mount's own name-adding calls add theirs after they succeed
  (`added`). A call whose outcome is unknown (a timeout) drops the lease instead (`lost`).
- A lease is used only until `sent_at + term * (1 - MARGIN)` by this process's monotonic clock,
  where sent_at is when the grant or the last renewal was *asked for*: the master's own expiry
  is later, so a holder the master cannot reach stops first.
- Renewals (every term / 4, by fuse/main.py) return the leases still held; any other one was
  recalled or expired: it is dropped here before the master is told (`release`), so by the time
  another node's create goes ahead no answer comes from the old set.

Names are compared as the mount's str names (the same decoding as every other call). Memory is
bounded: at most MAX_NAMES names over all leases (a grant that would pass it is released).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

MISSES_TO_LEASE = 8
MISS_WINDOW_S = 2.0
RETRY_AFTER_S = 30.0           # after a refusal or a loss, before asking again for that directory
MARGIN = 0.2                   # of the term: clock rate differences, the request's time in flight
MAX_NAMES = 262_144
MAX_TRACKED = 4_096            # directories with miss counts or retry times


@dataclass(slots=True)
class _Held:
    names: set[str]
    valid_until: float


@dataclass(slots=True)
class _Misses:
    count: int = 0
    window_start: float = 0.0
    retry_after: float = 0.0
    asking: bool = False
    added: set[str] = field(default_factory=set)   # own names added while asking
    spoiled: bool = False                            # an own change of unknown outcome while asking


@dataclass(slots=True)
class DirLeaseTable:
    enabled: bool = True
    clock: Callable[[], float] = time.monotonic
    _held: dict[int, _Held] = field(default_factory=dict)
    _misses: dict[int, _Misses] = field(default_factory=dict)
    _names: int = 0

    # -- answers ---------------------------------------------------------------------------------
    def absent(self, directory: int, name: str) -> bool:
        """True when a live lease says `name` is not in `directory`."""
        held = self._held.get(directory)
        if held is None:
            return False
        if self.clock() >= held.valid_until:
            self._drop(directory)
            return False
        return name not in held.names

    # -- when to ask -----------------------------------------------------------------------------
    def note_miss(self, directory: int) -> bool:
        """A master lookup in `directory` found nothing. True: ask for a lease now (the caller
        must then report `granted`, `refused` or `lost`)."""
        if not self.enabled or directory in self._held:
            return False
        now = self.clock()
        misses = self._tracked(directory, now)
        if misses.asking or now < misses.retry_after:
            return False
        if now - misses.window_start > MISS_WINDOW_S:
            misses.count, misses.window_start = 0, now
        misses.count += 1
        if misses.count < MISSES_TO_LEASE:
            return False
        misses.asking = True
        return True

    def granted(self, directory: int, names: Iterable[str], term_s: float, sent_at: float) -> bool:
        """Records a grant; False when it cannot be used (the caller releases it): an own change of
        unknown outcome happened while asking, or it would pass the memory bound."""
        misses = self._misses.pop(directory, None)
        held = _Held(set(names), sent_at + term_s * (1 - MARGIN))
        if misses is not None:
            held.names |= misses.added      # own creates that finished before the grant arrived
        if (misses is not None and misses.spoiled) or self._names + len(held.names) > MAX_NAMES:
            self._retry_later(directory)
            return False
        self._drop(directory)
        self._held[directory] = held
        self._names += len(held.names)
        return True

    def refused(self, directory: int) -> None:
        self._retry_later(directory)

    # -- this mount's own changes --------------------------------------------------------------
    def added(self, directory: int, name: str) -> None:
        """This mount added `name` to `directory` (the master said so)."""
        held = self._held.get(directory)
        if held is not None:
            if name not in held.names:
                held.names.add(name)
                self._names += 1
            return
        misses = self._misses.get(directory)
        if misses is not None and misses.asking:
            misses.added.add(name)

    def lost(self, directory: int) -> None:
        """Stop using the lease on `directory` (a recall, or a change this mount cannot account for)."""
        misses = self._misses.get(directory)
        if misses is not None and misses.asking:
            misses.spoiled = True
        if self._drop(directory):
            self._retry_later(directory)

    # -- renewal ---------------------------------------------------------------------------------
    def held_directories(self) -> list[int]:
        return list(self._held)

    def renewed(self, asked: Iterable[int], kept: Iterable[int], term_s: float, sent_at: float) -> list[int]:
        """Applies a renewal answer; returns the directories lost (to release at the master)."""
        kept_set = set(kept)
        gone = []
        for directory in asked:
            held = self._held.get(directory)
            if held is None:
                continue
            if directory in kept_set:
                held.valid_until = sent_at + term_s * (1 - MARGIN)
            else:
                self.lost(directory)
                gone.append(directory)
        return gone

    # -- internals --------------------------------------------------------------------------------
    def _drop(self, directory: int) -> bool:
        held = self._held.pop(directory, None)
        if held is None:
            return False
        self._names -= len(held.names)
        return True

    def _tracked(self, directory: int, now: float) -> _Misses:
        """The directory's miss record, made (in a bounded table) if it has none."""
        misses = self._misses.get(directory)
        if misses is None:
            if len(self._misses) >= MAX_TRACKED:
                self._misses.pop(next(iter(self._misses)))
            misses = self._misses[directory] = _Misses(window_start=now)
        return misses

    def _retry_later(self, directory: int) -> None:
        misses = self._tracked(directory, self.clock())
        misses.count, misses.asking, misses.spoiled = 0, False, False
        misses.added.clear()
        misses.window_start = misses.retry_after = self.clock() + RETRY_AFTER_S
