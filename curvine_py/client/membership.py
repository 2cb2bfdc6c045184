"""The client's cached copy of the master's membership view (every registered worker with its live
flag, and the epoch) and the rendezvous placement built from it.

Placement (KV keys) is over the live workers only; addresses are kept for every registered one, so
a block the master granted or listed on a worker that has just missed its lease (a late heartbeat
on a starved machine) can still be written or read there. A worker that is really gone fails that
request fast (connection refused) or within its deadline, and the caller moves on.

KV traffic never touches the master: the view is refreshed in the background of calls every
`refresh_s`, and immediately when a worker answers ESTALE or cannot be reached.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from curvine_py.core.cluster import MembershipView
from curvine_py.core.errors import CurvineError, Unavailable
from curvine_py.core.hashing import Node, Rendezvous

log = logging.getLogger(__name__)

GiB = 1 << 30


@dataclass(frozen=True, slots=True)
class WorkerAddress:
    worker_id: str
    host: str
    port: int
    node: str
    unix_socket: str
    capacity: int


@dataclass(frozen=True, slots=True)
class View:
    epoch: int
    workers: dict[str, WorkerAddress]     # the live workers: what placement ranks (KV keys)
    placement: Rendezvous
    # Every registered worker, live or not (a superset of `workers`): where a granted or listed
    # block copy is reached.
    reachable: dict[str, WorkerAddress]

    def address(self, worker_id: str) -> WorkerAddress | None:
        """The worker's address if the master has it registered (live or not)."""
        return self.reachable.get(worker_id)


def weight_of(capacity: int) -> float:
    """Placement weight: capacity in GiB (at least 1), so bigger disks own more keys."""
    return max(1.0, capacity / GiB)


def build_view(reply: MembershipView) -> View:
    """`workers` and the placement: the live ones; `reachable`: all (a master that sends only its
    live workers gives the same two maps)."""
    reachable = {
        w.worker_id: WorkerAddress(w.worker_id, w.host, w.port, w.node, w.unix_socket, w.capacity)
        for w in reply.workers
    }
    workers = {w.worker_id: reachable[w.worker_id] for w in reply.workers if w.live}
    nodes = [Node(w.worker_id, weight_of(w.capacity)) for w in workers.values()]
    return View(reply.epoch, workers, Rendezvous(nodes), reachable)


class MembershipCache:
    def __init__(self, fetch: Callable[[], MembershipView], refresh_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._refresh_s = refresh_s
        self._clock = clock
        self._lock = threading.Lock()
        self._view: View | None = None
        self._fetched_at = float("-inf")

    def view(self) -> View:
        """The cached view, refreshed when older than refresh_s. If the master is unreachable a
        previous view keeps serving (KV traffic does not depend on the master being up)."""
        if self._view is not None and self._clock() - self._fetched_at < self._refresh_s:
            return self._view
        return self.refresh()

    def peek(self) -> View | None:
        """The cached view if it is still fresh, without ever calling the master (for callers on
        an event loop, which must not block); None when a refresh is due."""
        view = self._view
        if view is not None and self._clock() - self._fetched_at < self._refresh_s:
            return view
        return None

    def refresh(self) -> View:
        with self._lock:
            try:
                view = build_view(self._fetch())
            except CurvineError as exc:
                if self._view is None:
                    raise Unavailable(f"cannot fetch membership from the master: {exc}") from None
                log.warning("membership refresh failed, keeping epoch %d: %s", self._view.epoch, exc)
                self._fetched_at = self._clock()
                return self._view
            self._view, self._fetched_at = view, self._clock()
            return view
