"""The KV index: block hash -> which replicas hold it, in which medium.

Fed by each replica's KV events (subscriber.py). A `STORAGE` block published with
`locality=REMOTE` lives in a shared pool (vLLM's tiering offload on a shared filesystem, the
curvine-py L2), so it counts for every replica, not only the one that wrote it.

`match` scores the longest consecutive prefix per replica the way llm-d's LongestPrefixScorer
does: walk the request's blocks from block 0, stop at the first block the replica cannot get
from any tier, and add the best tier weight of each block on the way.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

DEFAULT_WEIGHTS: dict[str, float] = {"GPU": 1.0, "CPU": 0.8, "STORAGE": 0.5}
SHARED = "*"   # the pseudo replica of shared-pool blocks


@dataclass(slots=True)
class Match:
    """One replica's predicted hit for a request."""
    blocks: int = 0                     # consecutive prefix blocks it can get from some tier
    credit: float = 0.0                 # sum of their tier weights (in blocks)
    tiers: dict[str, int] = field(default_factory=dict)   # blocks by the tier that serves them


class KVIndex:
    def __init__(self) -> None:
        # hash -> holder (a replica id, or SHARED) -> the mediums it is in there
        self._blocks: dict[int, dict[str, set[str]]] = {}
        self._by_holder: dict[str, set[int]] = {}

    def __len__(self) -> int:
        return len(self._blocks)

    def holders(self, block: int) -> Mapping[str, set[str]]:
        return self._blocks.get(block, {})

    def blocks_of(self, holder: str) -> int:
        return len(self._by_holder.get(holder, ()))

    def stored(self, replica: str, hashes: Iterable[int], medium: str, remote: bool = False) -> None:
        holder = SHARED if remote and medium == "STORAGE" else replica
        mine = self._by_holder.setdefault(holder, set())
        for block in hashes:
            self._blocks.setdefault(block, {}).setdefault(holder, set()).add(medium)
            mine.add(block)

    def removed(self, replica: str, hashes: Iterable[int], medium: str, remote: bool = False) -> None:
        holder = SHARED if remote and medium == "STORAGE" else replica
        for block in hashes:
            holders = self._blocks.get(block)
            if holders is None or holder not in holders:
                continue
            holders[holder].discard(medium)
            if not holders[holder]:
                del holders[holder]
                self._by_holder.get(holder, set()).discard(block)
            if not holders:
                del self._blocks[block]

    def clear(self, replica: str) -> int:
        """Forgets everything `replica` published (a restart, a seq gap replay cannot cover);
        returns how many blocks that was."""
        mine = self._by_holder.pop(replica, set())
        for block in mine:
            holders = self._blocks.get(block)
            if holders is not None:
                holders.pop(replica, None)
                if not holders:
                    del self._blocks[block]
        return len(mine)

    def match(self, hashes: Sequence[int], replicas: Sequence[str], weights: Mapping[str, float] = DEFAULT_WEIGHTS,
              l2_blocks: int = 0, l2_weight: Mapping[str, float] | None = None) -> dict[str, Match]:
        """Each replica's consecutive-prefix match. `l2_blocks`: the first blocks known (from the
        L2 pull API) to be in the shared L2, worth `l2_weight[replica]` (default: the STORAGE
        weight) to each replica."""
        storage = weights.get("STORAGE", 0.0)
        result = {}
        for replica in replicas:
            match = Match()
            local_l2 = storage if l2_weight is None else l2_weight.get(replica, storage)
            for position, block in enumerate(hashes):
                best, tier = 0.0, ""
                holders = self._blocks.get(block, {})
                for medium in holders.get(replica, ()):
                    if weights.get(medium, 0.0) > best:
                        best, tier = weights.get(medium, 0.0), medium
                if SHARED in holders and storage > best:
                    best, tier = storage, "STORAGE"
                if position < l2_blocks and local_l2 > best:
                    best, tier = local_l2, "L2"
                if best <= 0.0:
                    break
                match.blocks += 1
                match.credit += best
                match.tiers[tier] = match.tiers.get(tier, 0) + 1
            result[replica] = match
        return result
