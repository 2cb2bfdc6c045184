"""Re-replication and repair: blocks with fewer live copies than their policy wants (a worker lost
past its lease, a copy dropped as corrupt by a block report or a read) are copied from a live copy
to another worker chosen by placement, fewest copies first, at a bounded rate; surplus copies (a
lost worker came back after its blocks were copied elsewhere) are given up.

Data path: the master itself is the data-plane client of a repair. It reads the block from a
source with READ_BLOCK (every byte verified against the digests the worker stored at write time,
by the client's WorkerIO; a mismatch is reported to the source, which drops its copy), writes the
same block id to the target with WRITE_BLOCK, and only then records the location. So repair bytes
pass through the master's host; instructing workers to copy between themselves is the follow-up
for large clusters.

Never served stale: block ids are never reused (a rewrite allocates new ones), so a copy with a
known id holds the right bytes; a returning worker's copies of blocks freed while it was away are
unknown and deleted at its registration (store/reports.py), and its copies of blocks that were
re-replicated meanwhile are surplus and given up here.

Time and rate: `step()` is one round on the injected clock; the rate limit is a byte allowance
that grows by `rate` bytes per second of that clock (a copy may take it below zero; the next copy
waits until it is positive again), so tests drive rounds without sleeping.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from curvine_py.client.membership import WorkerAddress
from curvine_py.client.workerio import WorkerIO
from curvine_py.config import ClientConfig
from curvine_py.core import frames
from curvine_py.core.errors import CurvineError, NotFound
from curvine_py.master import placement
from curvine_py.master.membership import Membership
from curvine_py.master.namespace import Namespace
from curvine_py.master.store.replication import BlockCopies, ReplicationState
from curvine_py.master.storethread import StoreThread
from curvine_py.master.types import RepairStats, RoundResult, WorkerInfo
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.rpc.tls import TlsFiles

log = logging.getLogger(__name__)

DEFAULT_RATE = 64 << 20         # bytes/s
ROUND_S = 2.0                   # how often the background loop looks
FULL_SCAN_S = 60.0              # a full scan at least this often even when nothing seems to change
MAX_COPIES_PER_ROUND = 256      # so one round never holds a report back for long


class BlockCopier:
    """Copies one stored block between two workers over the data plane (blocking)."""

    def __init__(self, token: str, *, timeout_s: float = 10.0, tls: TlsFiles | None = None) -> None:
        files = tls or TlsFiles()
        self._io = WorkerIO(ClientConfig(token=token, data_timeout_s=timeout_s, short_circuit=False,
                                         connections_per_worker=1, tls_cert=files.cert, tls_key=files.key,
                                         tls_ca=files.ca), node="master")

    def close(self) -> None:
        self._io.close()

    def copy(self, block: BlockCopies, source: WorkerInfo, target: WorkerInfo) -> int:
        """Returns the bytes copied. Raises NotFound when the source no longer has the block, Corrupt
        when its bytes fail verification, Unavailable/Timeout when a worker does not answer."""
        reply, data = self._io.read(_address(source), frames.Op.READ_BLOCK,
                                    DataHeader(block_id=block.block_id, offset=0, length=0,
                                               checksum=block.checksum), whole=True)
        if data is None:
            raise NotFound(f"block {block.block_id:x} is not on {source.worker_id}")
        header = DataHeader(block_id=block.block_id, length=len(data), checksum=reply.checksum,
                            storage_class=int(block.storage_class),  # type: ignore[arg-type]
                            ttl_ms=block.ttl_ms)
        self._io.call(_address(target), frames.Op.WRITE_BLOCK, header, data)
        return len(data)

    def verify(self, block_id: int, worker: WorkerInfo, checksum: int = 0) -> int | None:
        """Has `worker` re-read and verify its copy of the block (data-plane SCRUB), also against the
        whole-block `checksum` recorded at commit (0: unknown). Returns its length, or None when it
        has no copy. Raises Corrupt when the copy failed (the worker dropped it),
        Unavailable/Timeout when it does not answer."""
        reply = self._io.call(_address(worker), frames.Op.SCRUB, DataHeader(block_id=block_id, checksum=checksum))
        return int(reply.header.length) if reply.header.found else None


def _address(w: WorkerInfo) -> WorkerAddress:
    return WorkerAddress(worker_id=w.worker_id, host=w.host, port=w.port, node=w.node,
                         unix_socket=w.unix_socket, capacity=w.capacity)


class Repairer:
    def __init__(self, ns: Namespace, store: StoreThread, membership: Membership, copier: BlockCopier, *,
                 rate: int = DEFAULT_RATE, clock: Callable[[], float] = time.monotonic) -> None:
        self._ns = ns
        self._store = store
        self._mem = membership
        self._copier = copier
        self.rate = rate
        self._clock = clock
        self._allowance = float(rate)
        self._last = clock()
        self._lock = threading.RLock()    # one round at a time (background loop and fsck --repair)
        self._stats = RepairStats(rate=rate)
        self._reader: Namespace | None = None
        self.state = ReplicationState((), (), (), ())
        # Skipping idle scans: (epoch, store changes) when the last scan found nothing to do.
        self._idle_at: tuple[int, int] | None = None
        self._scanned: tuple[tuple[int, int] | None, ReplicationState] = (None, self.state)
        self._last_full = clock()

    def close(self) -> None:
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        self._copier.close()

    @property
    def copier(self) -> BlockCopier:
        return self._copier

    def stats(self) -> RepairStats:
        return self._stats

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def scan(self) -> ReplicationState:
        """The replica counts now: the live set from the store thread, the full pass over the
        blocks on this repairer's own read-only connection (the store thread keeps writing)."""
        with self._lock:
            # The key first: store.call returns after its batch committed, so the snapshot below
            # sees at least every change the key counts (a later one only makes the key stale).
            key = self._store.call(self._changes)
            live = self._store.call(self._live_ids)
            if self._reader is None:
                self._reader = self._ns.reader()
            with self._reader.snapshot():
                self.state = self._reader.replication_state(live)
            self._scanned = (key, self.state)
            return self.state

    def cached_state(self) -> ReplicationState | None:
        """The last scan's counts when nothing that changes them happened since (else None)."""
        key, state = self._scanned
        return state if key == self._store.call(self._changes) else None

    def _live_ids(self) -> set[str]:
        self._mem.expire()
        return self._mem.live_ids()

    def step(self) -> RoundResult:
        """One round: scan, give up surplus copies, then copy under-replicated blocks (fewest copies
        first) while the byte allowance lasts."""
        with self._lock:
            now = self._clock()
            self._allowance = min(self._allowance + (now - self._last) * self.rate, float(max(self.rate, 1)))
            self._last = now
            if self._idle_at is not None and self._idle_at == self._store.call(self._changes) \
                    and now - self._last_full < FULL_SCAN_S:
                return RoundResult()       # nothing to do last time, and nothing changed since
            self._last_full = now
            before = self._store.call(self._changes)     # taken first: a change during the scan counts
            state = self.scan()
            live = {w.worker_id: w for w in self._store.call(self._mem.live_workers)}
            dropped = self._drop_surplus(state, live)
            copied = failed = unplaceable = 0
            throttled = False
            errors: list[str] = []
            for block in state.under[:MAX_COPIES_PER_ROUND]:
                if self._allowance <= 0:
                    throttled = True
                    break
                outcome = self._repair(block, live, errors)
                if outcome is None:
                    unplaceable += 1
                elif outcome:
                    copied += 1
                else:
                    failed += 1
            if copied or dropped:
                before = self._store.call(self._changes)
                state = self.scan()
            # Idle too when every live worker already holds each short block: only a new worker
            # (a new epoch) can change that.
            copyable = [b for b in state.under if len(b.holders) < len(live)]
            self._idle_at = before if not copyable and not state.surplus else None
            return RoundResult(copied, failed, dropped, throttled, unplaceable, tuple(errors))

    def _changes(self) -> tuple[int, int]:
        return self._mem.epoch, self._ns.replica_changes

    def _repair(self, block: BlockCopies, live: dict[str, WorkerInfo], errors: list[str]) -> bool | None:
        """Copies `block` until it has its wanted copies. None: no worker can take another copy."""
        candidates = [w for w in live.values() if w.worker_id not in block.holders]
        targets = placement.choose_workers(block.block_id, candidates, block.wanted - len(block.holders),
                                           block.placement, "")
        if not targets:
            if len(block.holders) >= len(live):   # every live worker already holds a copy
                message = (f"block {block.block_id:x} has {len(block.holders)} of {block.wanted} copies: "
                           f"cannot repair: only {len(live)} live worker{'' if len(live) == 1 else 's'}")
                if message not in errors:
                    errors.append(message)
                self._stats = dataclasses.replace(self._stats, last_error=message)
            return None
        sources = list(block.holders)
        ok = True
        for target in targets:
            if not self._copy_from_any(block, sources, live[target], live, errors):
                ok = False
                continue
            sources.append(target)
        return ok

    def _copy_from_any(self, block: BlockCopies, sources: list[str], target: WorkerInfo,
                       live: dict[str, WorkerInfo], errors: list[str]) -> bool:
        for source in sources:
            if source not in live:
                continue
            try:
                size = self._copier.copy(block, live[source], target)
            except CurvineError as exc:
                message = f"block {block.block_id:x} from {source} to {target.worker_id}: {exc}"
                log.warning("repair of %s failed", message)
                errors.append(message)
                self._stats = dataclasses.replace(self._stats, failed_copies=self._stats.failed_copies + 1,
                                                  last_error=message)
                continue
            self._allowance -= size
            if self._store.call(self._ns.add_replica, block.block_id, target.worker_id):
                self._stats = dataclasses.replace(self._stats, copied_blocks=self._stats.copied_blocks + 1,
                                                  copied_bytes=self._stats.copied_bytes + size)
                log.info("re-replicated block %x (%d bytes) from %s to %s (%d/%d copies)", block.block_id,
                         size, source, target.worker_id, len(sources) + 1, block.wanted)
            return True
        return False

    def _drop_surplus(self, state: ReplicationState, live: dict[str, WorkerInfo]) -> int:
        """Keeps the `wanted` holders placement ranks first, gives up the others."""
        dropped = 0
        for block in state.surplus:
            holders = [live[w] for w in block.holders if w in live]
            keep = set(placement.choose_workers(block.block_id, holders, block.wanted, block.placement, ""))
            for worker_id in block.holders:
                if worker_id not in keep:
                    self._store.call(self._ns.drop_replica, block.block_id, worker_id)
                    dropped += 1
                    log.info("block %x: surplus copy on %s given up (%d wanted)", block.block_id,
                             worker_id, block.wanted)
        self._stats = dataclasses.replace(self._stats, dropped_surplus=self._stats.dropped_surplus + dropped)
        return dropped

    def run(self, stop: threading.Event, interval_s: float = ROUND_S) -> None:
        """The background loop: a round every `interval_s` until `stop` is set; a failing round is
        logged and the loop goes on."""
        while not stop.wait(interval_s):
            try:
                self.step()
            except Exception:
                log.exception("repair round failed")
