"""KV objects (the LMCache path): key -> weighted rendezvous over the cached membership view ->
owner worker(s), directly; the master is not on the hot path.

Semantics (ARCHITECTURE.md): write-once per key (a re-put is an idempotent success), readers
never see partial objects, a miss is `None` (not an error), reads fail over along the key's rank
(replicas, then a miss) when an owner cannot be reached, and bad bytes are never returned.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
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
        # (view, replicas, key -> its read owners): one tuple, swapped whole when the view changes,
        # so a thread still on the old view never fills the new view's table.
        self._read_owners: tuple[View | None, int, dict[str, list[WorkerAddress]]] = (None, 0, {})

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

    def _with_view(self, action: Callable[[View], T]) -> T:
        """Runs `action` on the current view; once more on a fresh view after ESTALE."""
        try:
            return action(self._membership.view())
        except StaleEpoch:
            return action(self._membership.refresh())

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

        def attempt(view: View) -> None:
            header.epoch = view.epoch
            stored, errors = 0, []
            for worker in self._suspects.order(self.owners(key, view), _worker_id):
                if stored == wanted:
                    break
                try:
                    self._io.call(worker, frames.Op.PUT, header, view_data)
                    stored += 1
                except _FAILOVER as exc:
                    if not isinstance(exc, Corrupt):
                        self._suspects.mark(worker.worker_id)
                    errors.append(exc)
                    log.info("put %s: owner %s unreachable (%s), trying the next", key, worker.worker_id, exc)
            if not stored:
                raise errors[-1] if errors else Unavailable("no live workers")

        self._with_view(attempt)

    def get_view(self, key: str, out: Any = None) -> memoryview | None:
        """The object's bytes (in `out` if given: any writable buffer, see buffers.writable_view;
        else a new page-aligned buffer), or None on a miss."""
        validate_key(key, self._max_key_bytes)
        target = None if out is None else writable_view(out)
        return self._with_view(lambda view: self._get(key, view, target)[1])

    def get(self, key: str) -> bytes | None:
        data = self.get_view(key)
        return None if data is None else bytes(data)

    def get_into(self, key: str, out: Any) -> int | None:
        """Receives the object into the caller's buffer; returns its length, or None on a miss."""
        data = self.get_view(key, out)
        return None if data is None else len(data)

    def get_with_meta(self, key: str, out: Any = None) -> tuple[memoryview, bytes] | None:
        validate_key(key, self._max_key_bytes)
        target = None if out is None else writable_view(out)
        reply, data = self._with_view(lambda view: self._get(key, view, target))
        return None if data is None else (data, bytes(reply.user_meta))

    def _get(self, key: str, view: View, out: memoryview | None) -> tuple[DataHeader, memoryview | None]:
        header = DataHeader(key=key, epoch=view.epoch)
        miss = DataHeader(found=False)
        for worker in self._suspects.order(self.read_owners(key, view), _worker_id):
            try:
                reply, data = self._io.read(worker, frames.Op.GET, header, out, whole=True,
                                            deadline_s=self.deadline_s)
            except _FAILOVER as exc:
                if not isinstance(exc, Corrupt):
                    self._suspects.mark(worker.worker_id)
                log.info("get %s: owner %s failed (%s), trying the next", key, worker.worker_id, exc)
                continue
            self._suspects.clear(worker.worker_id)
            if data is not None:
                return reply, data
        return miss, None

    def exists(self, key: str) -> bool:
        return self.exists_prefix([key]) == 1

    def exists_prefix(self, keys: Sequence[str], *, pin: bool = True) -> int:
        """Length of the longest prefix of `keys` that is stored (LMCache's batched contains).
        With `pin`, hits stay readable for the worker's grace period."""
        for key in keys:
            validate_key(key, self._max_key_bytes)
        return self._with_view(lambda view: self._exists_prefix(list(keys), view, pin))

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
