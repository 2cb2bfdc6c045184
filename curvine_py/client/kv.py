"""KV objects (the LMCache path): key -> weighted rendezvous over the cached membership view ->
owner worker(s), directly; the master is not on the hot path.

Semantics (ARCHITECTURE.md): write-once per key (a re-put is an idempotent success), readers
never see partial objects, a miss is `None` (not an error), reads fail over along the key's rank
(replicas, then a miss) when an owner cannot be reached, and bad bytes are never returned.
"""
from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, TypeVar

from curvine_py.client.buffers import writable_view
from curvine_py.client.membership import MembershipCache, View, WorkerAddress
from curvine_py.client.suspects import Suspects
from curvine_py.client.workerio import WorkerIO
from curvine_py.core import frames
from curvine_py.core.errors import Corrupt, CurvineError, InvalidArgument, StaleEpoch, Timeout, Unavailable
from curvine_py.core.keys import validate_key
from curvine_py.proto.curvine.v1.common_pb2 import CACHE, DURABLE
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader

log = logging.getLogger(__name__)

T = TypeVar("T")
# Errors after which the next owner in rank order is tried.
_FAILOVER = (Unavailable, Timeout, Corrupt)
# Keys whose read owners are remembered per membership view. Why: ranking the workers costs about
# a microsecond per worker (bench placement), several times more at the start of a request whose
# caches the previous object's bytes have just flushed, and hot keys (shared prompt prefixes) are
# read again and again.
READ_OWNERS_CACHED = 4096
DEFAULT_DEADLINE_S = 2.0   # ClientConfig.kv_deadline_s
# A batched get splits one owner's keys over this many connections, each pipelined (measured in
# bench lmcache's reference scenario, see get_many_with_meta).
BATCH_STREAMS = 4
BATCH_THREADS = 8          # connections of batched gets in flight, all owners together


def _worker_id(worker: WorkerAddress) -> str:
    return worker.worker_id


class KVClient:
    def __init__(self, membership: MembershipCache, io: WorkerIO, *, replicas: int = 1,
                 max_key_bytes: int = 1024, deadline_s: float = DEFAULT_DEADLINE_S,
                 suspects: Suspects | None = None) -> None:
        """`deadline_s`: how long a get or exists waits for one owner (connect included) before
        it tries the next or misses."""
        if not deadline_s > 0:
            raise InvalidArgument(f"KV deadline of {deadline_s} s: must be positive")
        self._membership = membership
        self._io = io
        self.replicas = max(1, replicas)
        self._max_key_bytes = max_key_bytes
        self.deadline_s = deadline_s
        self._suspects = suspects or Suspects()
        self.batch_streams = BATCH_STREAMS
        self._batch_pool: ThreadPoolExecutor | None = None
        self._batch_lock = threading.Lock()
        # (view, replicas, key -> its read owners): one tuple, swapped whole when the view changes,
        # so a thread still on the old view never fills the new view's table.
        self._read_owners: tuple[View | None, int, dict[str, list[WorkerAddress]]] = (None, 0, {})

    def close(self) -> None:
        if self._batch_pool is not None:
            self._batch_pool.shutdown(wait=False, cancel_futures=True)

    # -- placement ---------------------------------------------------------------------------
    def owners(self, key: str, view: View | None = None, count: int | None = None) -> list[WorkerAddress]:
        """The key's owners, best first: all live workers (the failover order) or the first `count`
        (a partial selection, cheaper than ranking every worker on the read path)."""
        view = view or self._membership.view()
        ids = view.placement.rank(key) if count is None else view.placement.owners(key, count)
        return [view.workers[w] for w in ids]

    def read_owners(self, key: str, view: View) -> list[WorkerAddress]:
        """The owners a read tries, in order (the first `replicas + 1`), remembered per view."""
        cached_view, replicas, table = self._read_owners
        if cached_view is not view or replicas != self.replicas:
            table = {}
            self._read_owners = (view, self.replicas, table)
        owners = table.get(key)
        if owners is None:
            if len(table) >= READ_OWNERS_CACHED:
                table.clear()
            owners = table[key] = self.owners(key, view, self.replicas + 1)
        return owners

    def _with_view(self, action: Callable[[View], T], on_stale: Callable[[], T] | None = None) -> T:
        """Runs `action` on the current view; once more on a fresh view after ESTALE. Still stale
        (the refresh kept the old view: the master is unreachable or behind the workers): a read
        answers `on_stale()` (a miss: the cache stays usable), a write raises Unavailable, never
        StaleEpoch to the caller."""
        try:
            return action(self._membership.view())
        except StaleEpoch:
            return self._after_stale(action, on_stale)

    def _after_stale(self, action: Callable[[View], T], on_stale: Callable[[], T] | None) -> T:
        """The second half of `_with_view`: `action` on a refreshed view (the per-request paths
        make the first attempt themselves, without the closure)."""
        try:
            return action(self._membership.refresh())
        except StaleEpoch as exc:
            if on_stale is not None:
                log.info("membership view still stale after a refresh (%s): answering a miss", exc)
                return on_stale()
            raise Unavailable(f"the workers know a newer membership than this client can fetch ({exc}); "
                              "try again once the master answers") from None

    # -- operations --------------------------------------------------------------------------
    def put(self, key: str, data: bytes | bytearray | memoryview, *, user_meta: bytes = b"",
            ttl_ms: int = 0, durable: bool = False, replicas: int | None = None) -> None:
        """Stores `data` on the key's first `replicas` reachable owners; raises only if none took it."""
        validate_key(key, self._max_key_bytes)
        view_data = memoryview(data).cast("B")
        wanted = replicas or self.replicas
        # The chunk digests follow the payload (digest trailer): each chunk is hashed as it is
        # sent, and the worker checks every one of them before the object becomes visible.
        header = DataHeader(key=key, length=len(view_data), digest_trailer=True, user_meta=user_meta,
                            ttl_ms=ttl_ms, storage_class=DURABLE if durable else CACHE)

        try:   # the first attempt without a closure (this runs for every put)
            self._put_on(self._membership.view(), key, header, view_data, wanted)
        except StaleEpoch:
            self._after_stale(lambda view: self._put_on(view, key, header, view_data, wanted), None)

    def _put_on(self, view: View, key: str, header: DataHeader, data: memoryview, wanted: int) -> None:
        """One put attempt on `view`: the owners in failover order until `wanted` took it."""
        header.epoch = view.epoch
        stored, errors = 0, []
        workers = view.workers
        for worker in self._suspects.order([workers[w] for w in view.placement.rank(key)], _worker_id):
            if stored == wanted:
                break
            try:
                self._io.call(worker, frames.Op.PUT, header, data)
                stored += 1
            except _FAILOVER as exc:
                if not isinstance(exc, Corrupt):
                    self._suspects.mark(worker.worker_id)
                errors.append(exc)
                log.info("put %s: owner %s unreachable (%s), trying the next", key, worker.worker_id, exc)
        if not stored:
            raise errors[-1] if errors else Unavailable("no live workers")

    def get_view(self, key: str, out: Any = None) -> memoryview | None:
        """The object's bytes (in `out` if given: any writable buffer, see buffers.writable_view;
        else a new page-aligned buffer), or None on a miss."""
        return self._fetch(key, out)[1]

    def get(self, key: str) -> bytes | None:
        data = self._fetch(key, None)[1]
        return None if data is None else bytes(data)

    def get_into(self, key: str, out: Any) -> int | None:
        """Receives the object into the caller's buffer; returns its length, or None on a miss."""
        data = self._fetch(key, out)[1]
        return None if data is None else len(data)

    def get_with_meta(self, key: str, out: Any = None) -> tuple[memoryview, bytes] | None:
        reply, data = self._fetch(key, out)
        return None if data is None else (data, bytes(reply.user_meta))

    def _fetch(self, key: str, out: Any) -> tuple[DataHeader, memoryview | None]:
        """(reply, bytes or None on a miss) of one get: the first attempt on the cached view
        without a closure (this runs for every get), once more on a refreshed one after ESTALE."""
        validate_key(key, self._max_key_bytes)
        target = None if out is None else writable_view(out)
        try:
            return self._get(key, self._membership.view(), target)
        except StaleEpoch:
            return self._after_stale(lambda view: self._get(key, view, target), self._stale_miss)

    def get_many(self, keys: Sequence[str], outs: Sequence[Any] | None = None) -> list[memoryview | None]:
        """`get_view` of several keys at once (see get_many_with_meta); None for each miss."""
        return [None if found is None else found[0] for found in self.get_many_with_meta(keys, outs)]

    def get_many_with_meta(self, keys: Sequence[str],
                           outs: Sequence[Any] | None = None) -> list[tuple[memoryview, bytes] | None]:
        """Several objects at once, in key order: (bytes, user meta) or None for a miss. `outs`: one
        writable buffer per key (see get_view), or None for new buffers.

        The keys are grouped by their first owner; one owner's keys are split over up to
        `batch_streams` connections, each pipelined (several requests in flight, so the worker's
        per-request work overlaps the previous payload), and all owners run at once. Every object
        is verified as in get(). A key its first owner did not serve (a miss, an error, an owner
        that cannot be reached within the deadline) then goes along its other owners as get()
        does, skipping every owner that failed during this batch: a hung owner costs the batch
        one deadline, not one more per key it holds a replica of."""
        if outs is not None and len(outs) != len(keys):
            raise InvalidArgument(f"{len(keys)} keys but {len(outs)} buffers")
        for key in keys:
            validate_key(key, self._max_key_bytes)
        targets: list[memoryview | None] = [None] * len(keys) if outs is None else [writable_view(o) for o in outs]
        view = self._membership.view()
        found: list[tuple[DataHeader, memoryview] | None] = [None] * len(keys)
        first: dict[str, list[int]] = {}
        asked: list[str | None] = [None] * len(keys)      # the owner the batch asked for each key
        for index, key in enumerate(keys):
            owners = self._suspects.order(self.read_owners(key, view), _worker_id)
            if owners:
                asked[index] = owners[0].worker_id
                first.setdefault(owners[0].worker_id, []).append(index)
        batches = []
        for worker_id, indexes in first.items():
            streams = max(1, min(self.batch_streams, len(indexes)))
            batches += [(view.workers[worker_id], indexes[s::streams]) for s in range(streams)]

        mistakes: list[InvalidArgument] = []
        failed: set[str] = set()     # owners that failed in this batch (set.add is atomic)

        def run(worker: WorkerAddress, indexes: list[int]) -> None:
            headers = [DataHeader(key=keys[i], epoch=view.epoch) for i in indexes]
            try:
                answers = self._io.read_many(worker, frames.Op.GET, headers, [targets[i] for i in indexes],
                                             whole=True, deadline_s=self.deadline_s)
            except _FAILOVER as exc:
                self._suspects.mark(worker.worker_id)
                failed.add(worker.worker_id)
                log.info("batched get: owner %s failed (%s), trying the next", worker.worker_id, exc)
                return
            self._suspects.clear(worker.worker_id)
            for index, answer in zip(indexes, answers, strict=True):
                if isinstance(answer, InvalidArgument):
                    mistakes.append(answer)      # the caller's (a buffer too small), as in get_into
                elif isinstance(answer, CurvineError):
                    log.info("get %s: owner %s failed (%s), trying the next", keys[index], worker.worker_id, answer)
                elif answer[1] is not None:
                    found[index] = (answer[0], answer[1])

        if batches:
            # The first stream runs on this thread (one thread hand-off fewer per batch); the
            # others are waited for whatever happens here (they write into the caller's buffers).
            futures = [self._batch_executor().submit(run, *batch) for batch in batches[1:]]
            try:
                run(*batches[0])
            finally:
                wait(futures)
            for future in futures:
                future.result()
        if mistakes:
            raise mistakes[0]
        results: list[tuple[memoryview, bytes] | None] = []
        for index, key in enumerate(keys):
            hit = found[index]
            if hit is None:     # the rest of its owners, as get() goes (not those asked or failed)
                first_asked = asked[index]
                skip = frozenset(() if first_asked is None else (first_asked,))
                reply, data = self._with_view(functools.partial(self._get, key, out=targets[index], skip=skip,
                                                                failed=failed),
                                              on_stale=self._stale_miss)
                hit = None if data is None else (reply, data)
            results.append(None if hit is None else (hit[1], bytes(hit[0].user_meta)))
        return results

    @staticmethod
    def _stale_miss() -> tuple[DataHeader, memoryview | None]:
        return DataHeader(found=False), None

    def _batch_executor(self) -> ThreadPoolExecutor:
        with self._batch_lock:
            if self._batch_pool is None:
                self._batch_pool = ThreadPoolExecutor(max_workers=BATCH_THREADS, thread_name_prefix="kv-batch")
            return self._batch_pool

    def _get(self, key: str, view: View, out: memoryview | None, skip: frozenset[str] = frozenset(),
             failed: set[str] | None = None) -> tuple[DataHeader, memoryview | None]:
        """Tries the key's owners in turn. A batched get passes `skip` (the owner already asked
        for this key) and `failed` (owners that failed during the batch: not tried, and one that
        fails here is added)."""
        header = DataHeader(key=key, epoch=view.epoch)
        owners = self._suspects.order(self.read_owners(key, view), _worker_id)
        for worker in owners:
            if worker.worker_id in skip or (failed and worker.worker_id in failed):
                continue
            try:
                reply, data = self._io.read(worker, frames.Op.GET, header, out, whole=True,
                                            deadline_s=self.deadline_s)
            except _FAILOVER as exc:
                if not isinstance(exc, Corrupt):
                    self._suspects.mark(worker.worker_id)
                    if failed is not None:
                        failed.add(worker.worker_id)
                log.info("get %s: owner %s failed (%s), trying the next", key, worker.worker_id, exc)
                continue
            self._suspects.clear(worker.worker_id)
            if data is not None:
                return reply, data
        return DataHeader(found=False), None

    def exists(self, key: str) -> bool:
        return self.exists_prefix([key]) == 1

    def exists_prefix(self, keys: Sequence[str], *, pin: bool = True) -> int:
        """Length of the longest prefix of `keys` that is stored (LMCache's batched contains).
        With `pin`, hits stay readable for the worker's grace period."""
        for key in keys:
            validate_key(key, self._max_key_bytes)
        return self._with_view(lambda view: self._exists_prefix(list(keys), view, pin), on_stale=lambda: 0)

    def _exists_prefix(self, keys: list[str], view: View, pin: bool) -> int:
        by_owner: dict[str, list[int]] = {}
        for index, key in enumerate(keys):
            ranked = view.placement.owners(key, 1)
            if not ranked:
                return 0
            by_owner.setdefault(ranked[0], []).append(index)
        first_miss = len(keys)
        for worker_id, indexes in by_owner.items():
            if indexes[0] >= first_miss:
                continue  # every key of this owner lies after a known miss
            header = DataHeader(keys=[keys[i] for i in indexes], pin=pin, epoch=view.epoch)
            try:
                hits = self._io.call(view.workers[worker_id], frames.Op.EXISTS, header,
                                     deadline_s=self.deadline_s).header.hit_count
            except _FAILOVER:
                self._suspects.mark(worker_id)
                hits = 0
            if hits < len(indexes):
                first_miss = min(first_miss, indexes[hits])
        return first_miss

    def delete(self, key: str) -> bool:
        """Removes the key from every owner that has it; True if any had it."""
        validate_key(key, self._max_key_bytes)

        def attempt(view: View) -> bool:
            found = False
            for worker in self.owners(key, view, self.replicas + 1):
                try:
                    found |= self._io.call(worker, frames.Op.DELETE, DataHeader(key=key)).header.found
                except CurvineError as exc:
                    if isinstance(exc, StaleEpoch):
                        raise
                    log.info("delete %s on %s failed: %s", key, worker.worker_id, exc)
            return found

        return self._with_view(attempt)
