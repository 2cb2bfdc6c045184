"""The L2 pull API: for LMCache chunk keys, whether the L2 holds them and on which nodes.

For routers that do not consume shared-pool events (SMG drops `locality=REMOTE`), and for
curvine-py's own router (`curvine-py router --l2-master`): fast enough to call per request.
A key's candidate holders are its first `copies` owners by weighted rendezvous over the cached
membership view (the owners a read would try), asked rank by rank: every first owner once with all
its keys in one batched EXISTS (unpinned), then the next owners only for the keys still missing.
EXISTS answers the length of the stored prefix of the keys it is given, so after a miss the keys
behind it are asked again (one more round trip per miss on that owner). A key counts as stored
on the first owner found holding it. `prefix=True` (what a router needs) reports every key after
the first one stored nowhere as absent.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from curvine_py.client.membership import MembershipCache, View
from curvine_py.client.workerio import WorkerIO
from curvine_py.core import frames
from curvine_py.core.errors import Corrupt, StaleEpoch, Timeout, Unavailable
from curvine_py.core.keys import validate_key
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Residence:
    key: str
    stored: bool
    workers: tuple[str, ...] = ()   # worker ids holding a complete copy
    nodes: tuple[str, ...] = ()     # their node names
    hosts: tuple[str, ...] = ()     # their data-plane addresses

    @classmethod
    def miss(cls, key: str) -> Residence:
        return cls(key, False)


def stored_prefix(found: Sequence[Residence]) -> int:
    """How many keys from the first are all stored."""
    count = 0
    for residence in found:
        if not residence.stored:
            break
        count += 1
    return count


class L2Where:
    def __init__(self, membership: MembershipCache, io: WorkerIO, *, copies: int = 2,
                 deadline_s: float = 0.5) -> None:
        """`copies`: how many owners of each key to ask (the kv replicas + 1 a read tries)."""
        self._membership = membership
        self._io = io
        self.copies = max(1, copies)
        self.deadline_s = deadline_s

    def where(self, keys: Sequence[str], *, prefix: bool = False) -> list[Residence]:
        for key in keys:
            validate_key(key)
        try:
            return self._where(list(keys), self._membership.view(), prefix)
        except StaleEpoch:
            try:
                return self._where(list(keys), self._membership.refresh(), prefix)
            except StaleEpoch:
                return [Residence.miss(k) for k in keys]

    def _where(self, keys: list[str], view: View, prefix: bool) -> list[Residence]:
        ranked = [view.placement.owners(key, self.copies) for key in keys]
        holders: list[list[str]] = [[] for _ in keys]
        # Rank by rank: a key's first owner is asked first; only keys it does not hold go on to
        # the next owner (one batched EXISTS per owner and rank, and one more per miss).
        for rank in range(self.copies):
            by_owner: dict[str, list[int]] = {}
            for index, owners in enumerate(ranked):
                if rank < len(owners) and not holders[index]:
                    by_owner.setdefault(owners[rank], []).append(index)
            for worker_id, indexes in by_owner.items():
                for index in self._ask(view, worker_id, keys, indexes):
                    holders[index].append(worker_id)
        found = []
        absent = False
        for key, workers in zip(keys, holders, strict=True):
            absent = absent or not workers
            if prefix and absent:
                found.append(Residence.miss(key))
                continue
            addresses = [view.workers[w] for w in workers]
            found.append(Residence(key, bool(workers), tuple(workers), tuple(a.node for a in addresses),
                                   tuple(a.host for a in addresses)))
        return found

    def _ask(self, view: View, worker_id: str, keys: list[str], indexes: list[int]) -> list[int]:
        """The indexes (of `indexes`) the worker holds."""
        held: list[int] = []
        remaining = indexes
        while remaining:
            header = DataHeader(keys=[keys[i] for i in remaining], pin=False, epoch=view.epoch)
            try:
                hits = self._io.call(view.workers[worker_id], frames.Op.EXISTS, header,
                                     deadline_s=self.deadline_s).header.hit_count
            except (Unavailable, Timeout, Corrupt) as exc:
                log.info("where: owner %s unreachable (%s): its keys count as absent", worker_id, exc)
                return held
            held += remaining[:hits]
            if hits >= len(remaining):
                break
            remaining = remaining[hits + 1:]
        return held


def where(client: object, keys: Sequence[str], *, prefix: bool = False) -> list[Residence]:
    """`L2Where(...).where(keys)` on a `CurvineClient` (its membership cache and worker pool)."""
    from curvine_py.client import CurvineClient
    if not isinstance(client, CurvineClient):
        raise TypeError("where() takes a CurvineClient")
    return L2Where(client.membership, client.io, copies=client.kv.replicas + 1,
                   deadline_s=client.kv.deadline_s).where(keys, prefix=prefix)
