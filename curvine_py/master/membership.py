"""Worker membership: registration with block-report reconcile, heartbeats, leases, the epoch.

The live set is held in memory; its changes (join, re-register, leave) bump the epoch, and the
epoch plus each worker's last known info and live flag are committed to the store before any reply,
so the epoch never goes backwards across restarts. A restarted master takes the workers that were
live back with a fresh lease (clients keep a usable placement view); those that do not heartbeat
within the lease leave as usual.

Clocks are injected: `clock` (seconds, monotonic) drives leases, `wall_ms` stamps
last_heartbeat_ms for humans. Unit tests pass fake clocks and never sleep.

Concurrency: used only from the store thread, like the Namespace it wraps; except `copies`, which
any thread may call (GetBlocks runs in the handler threads): it reads `_reach`, the registered and
live ids as one immutable pair that the store thread replaces whenever either set changes
(registration, lease expiry), never on an ordinary heartbeat.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable

from curvine_py.core.errors import InvalidArgument
from curvine_py.master.namespace import Namespace
from curvine_py.master.types import (
    ClusterReport,
    HeartbeatResult,
    Inventory,
    MembershipView,
    NamespaceCounts,
    Registered,
    Usage,
    WorkerInfo,
)

log = logging.getLogger(__name__)

MAX_WORKER_ID = 128


def _wall_ms() -> int:
    return int(time.time() * 1000)


def validate_worker_id(worker_id: str) -> None:
    # Worker ids are joined with "," in the open-blocks table and shown in reports.
    if not worker_id or len(worker_id) > MAX_WORKER_ID:
        raise InvalidArgument(f"worker id must be 1..{MAX_WORKER_ID} characters")
    if any(c in worker_id for c in ", \t\r\n\x00"):
        raise InvalidArgument(f"worker id {worker_id!r} contains a separator or whitespace")


class Membership:
    def __init__(self, ns: Namespace, *, lease_ms: int = 5000, heartbeat_interval_ms: int = 1000,
                 clock: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] = _wall_ms) -> None:
        if lease_ms <= 0 or heartbeat_interval_ms <= 0:
            raise InvalidArgument("lease_ms and heartbeat_interval_ms must be positive")
        self._ns = ns
        self.lease_ms = lease_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self._clock = clock
        self._wall_ms = wall_ms
        self._workers: dict[str, WorkerInfo] = {w.worker_id: w for w in ns.load_workers()}
        self._last_seen: dict[str, float] = {}
        now = clock()
        for worker in self._workers.values():
            if worker.live:
                self._last_seen[worker.worker_id] = now
        self._epoch = ns.epoch()
        self._reach: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
        self._publish()
        # fsck: live workers asked to send their full inventory again (answered `reregister` at their
        # next heartbeat), and what each inventory found since it was asked for.
        self._inventory_wanted: set[str] = set()
        self._inventories: dict[str, Inventory] = {}
        self._inventory_deletes = False   # fsck --repair: orphans found by those inventories are deleted
        # Stall credit (see expect_checks_every): when the last lease check was, and how often one comes.
        self._checked_at: float | None = None
        self._check_interval_s = 0.0
        if self._last_seen:
            log.info("restored %d live workers at epoch %d; their leases restart now",
                     len(self._last_seen), self._epoch)

    def _publish(self) -> None:
        """After a change of the registered or the live ids (store thread): what `copies` reads."""
        self._reach = (frozenset(self._workers), frozenset(self._last_seen))

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def cluster_id(self) -> str:
        return self._ns.cluster_id

    def _commit_change(self, changed: Iterable[WorkerInfo]) -> None:
        """Persist changed worker rows and the next epoch in one transaction, then adopt them."""
        rows = list(changed)
        epoch = self._epoch + 1
        with self._ns.transaction():
            for row in rows:
                self._ns.save_worker(row)
            self._ns.set_epoch(epoch)
        self._epoch = epoch
        for row in rows:
            self._workers[row.worker_id] = row
        self._publish()

    # ------------------------------------------------------------------ RPCs

    def register(self, info: WorkerInfo, block_ids: Iterable[int] = ()) -> Registered:
        """A worker (re)joins with its full block report. Worker ids are chosen and persisted by
        the workers; a known id's info is replaced."""
        validate_worker_id(info.worker_id)
        if not all(0 <= port < 65536 for port in (info.port, info.lm_port, info.metrics_port)):
            raise InvalidArgument("port out of range")
        record = dataclasses.replace(info, live=True, last_heartbeat_ms=self._wall_ms())
        reported = list(block_ids)
        with self._ns.transaction():
            reconciled = self._ns.reconcile_report(info.worker_id, reported)
            self._commit_change([record])
        delete = reconciled.delete
        if info.worker_id in self._inventory_wanted:
            # Asked for by fsck: without --repair its orphans are only counted and stay on the worker
            # (fsck without --repair changes no stored data); its next ordinary registration deletes them.
            self._inventory_wanted.discard(info.worker_id)
            self._inventories[info.worker_id] = Inventory(info.worker_id, len(reported), reconciled.missing,
                                                          len(delete), self._inventory_deletes)
            if not self._inventory_deletes:
                delete = ()
        self._last_seen[info.worker_id] = self._clock()
        self._publish()
        log.info("worker %s registered (%s:%d node %s, %d blocks reported, %d to delete), epoch %d",
                 info.worker_id, info.host, info.port, info.node, len(reported), len(delete), self._epoch)
        return Registered(self.cluster_id, self._epoch, self.heartbeat_interval_ms, self.lease_ms,
                          tuple(delete))

    def heartbeat(self, worker_id: str, usage: Usage, evicted: Iterable[int] = (),
                  bad: Iterable[int] = ()) -> HeartbeatResult:
        self.expire()
        if worker_id not in self._last_seen:
            return HeartbeatResult(self._epoch, reregister=True)
        self._last_seen[worker_id] = self._clock()
        self._workers[worker_id] = dataclasses.replace(
            self._workers[worker_id], capacity=usage.capacity, used=usage.used, available=usage.available,
            blocks=usage.blocks, objects=usage.objects, evictions=usage.evictions,
            free_space_ratio=usage.free_space_ratio, reserve_bytes=usage.reserve_bytes,
            fs_free_bytes=usage.fs_free_bytes, hits=usage.hits, misses=usage.misses,
            metrics_port=usage.metrics_port if 0 <= usage.metrics_port < 65536 else 0,
            last_heartbeat_ms=self._wall_ms())
        evicted, bad = list(evicted), list(bad)
        if evicted or bad:
            with self._ns.transaction():
                gone = self._ns.drop_locations(worker_id, evicted, unlink_cache=True)
                broken = self._ns.drop_locations(worker_id, bad, unlink_cache=True)
            if gone.unlinked_inos or broken.unlinked_inos:
                log.info("worker %s: %d evicted, %d bad blocks; unlinked cache files %s", worker_id,
                         len(evicted), len(bad), list(gone.unlinked_inos + broken.unlinked_inos))
            if bad:
                log.warning("worker %s reported bad blocks %s", worker_id, bad[:20])
        deletions = self._ns.take_deletions(worker_id)
        # fsck asked for this worker's inventory: it sends it by registering again (after this beat's
        # reports, which are taken above, and deletions, which it applies first).
        again = worker_id in self._inventory_wanted and worker_id not in self._inventories
        return HeartbeatResult(self._epoch, reregister=again, delete_block_ids=tuple(deletions))

    def expect_checks_every(self, interval_s: float) -> None:
        """The master's maintenance loop checks the leases every `interval_s`. From now on a check
        that comes later than two intervals after the previous one means the master itself did not
        run (starved of CPU, paused, its store thread stuck in a slow commit): heartbeats that
        arrived meanwhile wait unread in its queues, so the excess is credited to every worker
        instead of expiring them all at the first call after the stall. A steadily slow loop gets
        no credit, so a dead worker still leaves."""
        self._check_interval_s = interval_s
        self._checked_at = self._clock()

    def _credit_stall(self, now: float) -> None:
        if self._checked_at is None:
            return
        stalled = now - self._checked_at - 2 * self._check_interval_s
        self._checked_at = now
        if stalled <= 0 or not self._last_seen:
            return
        for worker_id, seen in self._last_seen.items():   # never past now: a credit is not a lease
            self._last_seen[worker_id] = min(seen + stalled, now)
        log.warning("the master did not check leases for %.1f s beyond its interval; the workers' "
                    "silence in that time is not held against them", stalled)

    def expire(self) -> list[str]:
        """Workers silent for longer than the lease leave the live set (one epoch bump for all)."""
        now = self._clock()
        self._credit_stall(now)
        limit = self.lease_ms / 1000.0
        gone = sorted(w for w, seen in self._last_seen.items() if now - seen > limit)
        if not gone:
            return []
        self._commit_change(dataclasses.replace(self._workers[w], live=False) for w in gone)
        for worker_id in gone:
            del self._last_seen[worker_id]
        self._publish()
        log.warning("workers %s missed their lease of %d ms and left the view, epoch %d",
                    gone, self.lease_ms, self._epoch)
        return gone

    def request_inventories(self, delete_orphans: bool = False) -> list[str]:
        """fsck: every live worker is to send its full block inventory again (at its next heartbeat);
        results of earlier requests are forgotten. `delete_orphans`: the blocks nothing references
        that they report are deleted on them, else left. Returns the workers asked."""
        self.expire()
        self._inventory_deletes = delete_orphans
        self._inventory_wanted = set(self._last_seen)
        self._inventories = {}
        return sorted(self._inventory_wanted)

    def inventories(self) -> tuple[list[Inventory], list[str]]:
        """(what the requested inventories found, live workers asked that have not sent theirs)."""
        self.expire()
        pending = sorted(w for w in self._inventory_wanted if w in self._last_seen)
        return sorted(self._inventories.values(), key=lambda i: i.worker_id), pending

    def live_workers(self) -> list[WorkerInfo]:
        return [self._workers[w] for w in sorted(self._last_seen)]

    def live_ids(self) -> set[str]:
        return set(self._last_seen)

    def view(self) -> MembershipView:
        """Every registered worker with its live flag: clients place keys on the live ones and keep
        the others' addresses, so a block granted or listed on a worker that has just missed its
        lease (late heartbeats on a starved machine, while it serves on) is still reached."""
        self.expire()
        return MembershipView(self._epoch, tuple(self.all_workers()), self.cluster_id)

    def copies(self, worker_ids: Iterable[str]) -> tuple[str, ...]:
        """A block's recorded copies a reader can reach: those on registered workers, the live ones
        first (each group in its given order), so a copy on a worker past its lease is tried last
        but still tried (it may only be late with its heartbeats). Safe from any thread."""
        registered, live = self._reach      # one read: a consistent pair
        known = [w for w in worker_ids if w in registered]
        return tuple([w for w in known if w in live] + [w for w in known if w not in live])

    def all_workers(self) -> list[WorkerInfo]:
        return [dataclasses.replace(w, live=w.worker_id in self._last_seen)
                for _, w in sorted(self._workers.items())]

    def report(self, counts: NamespaceCounts | None = None) -> ClusterReport:
        """`counts`: the namespace's, when the caller took them elsewhere (the service counts on a
        reader connection: a full count at a million inodes must not hold up the store thread)."""
        self.expire()
        live = self.live_workers()
        counts = counts if counts is not None else self._ns.counts()
        return ClusterReport(
            cluster_id=self.cluster_id, epoch=self._epoch, workers=tuple(self.all_workers()),
            capacity=sum(w.capacity for w in live), used=sum(w.used for w in live),
            available=sum(w.available for w in live), files=counts.files,
            directories=counts.directories, blocks=counts.blocks)
