"""Weighted rendezvous (highest-random-weight) hashing: key -> ordered owners.

Why HRW and not a ring: measured max/avg load 1.012 on 10 nodes (a 100-vnode ring: 1.11) and key
movement equal to the ideal share on join/leave; replicas are simply the next-highest scores and
weights (capacity) fit naturally. Cost is O(nodes) per key, trivial for hundreds of workers.

Score of node n for key k: w_n / -ln(u), u = uniform(0,1) from mix(hash(k), hash(n)). This is the
weighted form of HRW (Schindelhauer & Schomaker): node n wins with probability w_n / sum(w).
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import xxhash

_MASK64 = (1 << 64) - 1
_TWO_64 = float(1 << 64)


def hash64(data: str | bytes) -> int:
    return xxhash.xxh3_64_intdigest(data.encode() if isinstance(data, str) else data)


def _mix(a: int, b: int) -> int:
    """splitmix64 finaliser of a ^ b*golden: a good 64-bit mix without hashing the key again."""
    z = (a ^ ((b * 0x9E3779B97F4A7C15) & _MASK64)) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


@dataclass(frozen=True, slots=True)
class Node:
    node_id: str
    weight: float = 1.0


class Rendezvous:
    """An immutable placement view over weighted nodes (rebuild it when membership changes)."""

    __slots__ = ("_nodes",)

    def __init__(self, nodes: Sequence[Node]) -> None:
        seen: set[str] = set()
        prepared: list[tuple[str, int, float]] = []
        for node in nodes:
            if node.node_id in seen:
                raise ValueError(f"duplicate node id {node.node_id!r}")
            if not (node.weight > 0 and math.isfinite(node.weight)):
                raise ValueError(f"node {node.node_id!r} needs a positive weight, got {node.weight}")
            seen.add(node.node_id)
            prepared.append((node.node_id, hash64(node.node_id), node.weight))
        self._nodes = tuple(prepared)

    def __len__(self) -> int:
        return len(self._nodes)

    def _scores(self, key: str | bytes) -> list[tuple[float, str]]:
        key_hash = hash64(key)
        scores = []
        for node_id, node_hash, weight in self._nodes:
            u = (_mix(key_hash, node_hash) + 0.5) / _TWO_64  # strictly inside (0, 1)
            scores.append((weight / -math.log(u), node_id))
        return scores

    def rank(self, key: str | bytes) -> list[str]:
        """Every node, best owner first (replicas and failover walk this list)."""
        return [node_id for _, node_id in sorted(self._scores(key), reverse=True)]

    def owners(self, key: str | bytes, count: int = 1) -> list[str]:
        if count <= 0:
            return []
        scores = self._scores(key)
        if count == 1:
            return [max(scores)[1]] if scores else []
        return [node_id for _, node_id in heapq.nlargest(count, scores)]


def bulk_owners(node_ids: Sequence[str], weights: Sequence[float], key_hashes: object) -> object:
    """Index of the owner of each key hash, vectorised with numpy (simulations and benchmarks of
    placement over 10-1,000 nodes and millions of keys; must agree with `Rendezvous.owners`).
    numpy is imported lazily: only bench/ and tests need it."""
    import numpy as np

    keys = np.asarray(key_hashes, dtype=np.uint64)
    best_score = np.full(keys.shape, -np.inf)
    best = np.zeros(keys.shape, dtype=np.int64)
    golden, m1, m2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
    with np.errstate(over="ignore"):
        for index, (node_id, weight) in enumerate(zip(node_ids, weights, strict=True)):
            z = keys ^ (np.uint64(hash64(node_id)) * golden)
            z = (z ^ (z >> np.uint64(30))) * m1
            z = (z ^ (z >> np.uint64(27))) * m2
            z = z ^ (z >> np.uint64(31))
            u = (z.astype(np.float64) + 0.5) / _TWO_64
            score = weight / -np.log(u)
            better = score > best_score
            best[better] = index
            best_score[better] = score[better]
    return best
