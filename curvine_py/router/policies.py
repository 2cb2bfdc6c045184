"""The three routing policies: round-robin, prefix-aware, KV-aware.

- round-robin: the next healthy replica.
- prefix: consistent hashing of the prompt's first blocks (weighted rendezvous, core/hashing.py)
  with bounded load (Mirrokni, Thorup, Zadimoghaddam 2018): a replica takes a request only while
  its in-flight count is below ceil(c * (in flight + 1) / replicas), c = `--load-factor` (1.25);
  otherwise the next replica in the key's rendezvous order does.
- kv: the prompt's vLLM block hashes against the KV index (GPU/CPU/STORAGE from each replica's KV
  events, the shared L2 from `--l2-master`). For replica p, credit(p) = the tier-weighted length of
  its longest consecutive cached prefix (llm-d LongestPrefixScorer; GPU 1.0, CPU 0.8, STORAGE 0.5)
  in tokens, and
      cost(p) = queued_prefill_tokens(p) + (prompt_tokens - credit(p)) + inflight_cost * in_flight(p)
  (Dynamo's prefill-after-overlap plus a decode term). The lowest cost wins. Imbalance guard (SMG):
  when the winner has more than `--imbalance` requests in flight above the least loaded replica and
  more than `--imbalance-ratio` times its count, the least loaded replica gets the request.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from curvine_py.core.hashing import Node, Rendezvous
from curvine_py.router.blockhash import block_hashes
from curvine_py.router.index import DEFAULT_WEIGHTS, KVIndex
from curvine_py.router.l2 import L2Hit, L2Lookup
from curvine_py.router.prompt import Prompt
from curvine_py.router.replicas import Replica

POLICIES = ("round-robin", "prefix", "kv")


class NoReplica(RuntimeError):
    """No healthy replica to route to (answered 503)."""


@dataclass(slots=True)
class Decision:
    replica: Replica
    policy: str
    reason: str                      # round-robin | prefix | spill | kv | least-loaded | imbalance
    prompt_tokens: int = 0
    hit_tokens: int = 0              # predicted prefix hit, tokens (all tiers)
    tiers: dict[str, int] = field(default_factory=dict)   # predicted hit tokens per tier

    @property
    def prefill_tokens(self) -> int:
        return max(0, self.prompt_tokens - self.hit_tokens)


class Policy(Protocol):
    name: str

    async def choose(self, prompt: Prompt, replicas: Sequence[Replica]) -> Decision: ...


def least_loaded(replicas: Sequence[Replica]) -> Replica:
    return min(replicas, key=lambda r: (r.in_flight, r.queued_prefill, r.url))


class RoundRobin:
    name = "round-robin"

    def __init__(self) -> None:
        self._next = 0

    async def choose(self, prompt: Prompt, replicas: Sequence[Replica]) -> Decision:
        if not replicas:
            raise NoReplica("no healthy replica")
        ordered = sorted(replicas, key=lambda r: r.url)
        replica = ordered[self._next % len(ordered)]
        self._next += 1
        return Decision(replica, self.name, "round-robin", prompt.token_count)


class PrefixAware:
    name = "prefix"

    def __init__(self, *, block_size: int = 16, blocks: int = 4, chars: int = 1024, load_factor: float = 1.25) -> None:
        if load_factor < 1.0:
            raise ValueError(f"load factor {load_factor}: must be at least 1")
        self.block_size, self.blocks, self.chars, self.load_factor = block_size, blocks, chars, load_factor
        self._ring: tuple[tuple[str, ...], Rendezvous] | None = None

    def _rendezvous(self, replicas: Sequence[Replica]) -> Rendezvous:
        urls = tuple(sorted(r.url for r in replicas))
        if self._ring is None or self._ring[0] != urls:
            self._ring = (urls, Rendezvous([Node(u) for u in urls]))
        return self._ring[1]

    def bound(self, replicas: Sequence[Replica]) -> int:
        total = sum(r.in_flight for r in replicas)
        return max(1, math.ceil(self.load_factor * (total + 1) / len(replicas)))

    async def choose(self, prompt: Prompt, replicas: Sequence[Replica]) -> Decision:
        if not replicas:
            raise NoReplica("no healthy replica")
        by_url = {r.url: r for r in replicas}
        ranked = self._rendezvous(replicas).rank(prompt.prefix_key(self.block_size, self.blocks, self.chars))
        bound = self.bound(replicas)
        for position, url in enumerate(ranked):
            replica = by_url[url]
            if replica.in_flight < bound:
                return Decision(replica, self.name, "prefix" if position == 0 else "spill", prompt.token_count)
        return Decision(least_loaded(replicas), self.name, "least-loaded", prompt.token_count)


@dataclass(frozen=True, slots=True)
class KVSettings:
    block_size: int = 16
    seed: str = "0"
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    l2_local_weight: float = 0.6      # an L2 block on the replica's own node
    inflight_cost: int = 64           # tokens of cost per request in flight (its decode)
    imbalance: int = 16               # in-flight requests above the least loaded ...
    imbalance_ratio: float = 1.5      # ... and this many times its count: least loaded wins
    max_blocks: int = 4096            # blocks of a prompt hashed at most


class KVAware:
    name = "kv"

    def __init__(self, index: KVIndex, settings: KVSettings, l2: L2Lookup | None = None) -> None:
        self.index, self.settings, self.l2 = index, settings, l2

    def hashes(self, prompt: Prompt) -> list[int]:
        if prompt.tokens is None:
            return []
        s = self.settings
        return block_hashes(prompt.tokens, s.block_size, s.seed, prompt.cache_salt, s.max_blocks)

    async def choose(self, prompt: Prompt, replicas: Sequence[Replica]) -> Decision:
        if not replicas:
            raise NoReplica("no healthy replica")
        s = self.settings
        hashes = self.hashes(prompt)
        l2 = L2Hit(0)
        if self.l2 is not None and hashes and prompt.tokens is not None and prompt.cache_salt is None:
            l2 = await self.l2.lookup(prompt.tokens)
        storage = s.weights.get("STORAGE", 0.0)
        l2_weight = {r.url: (s.l2_local_weight if r.host in l2.hosts else storage) for r in replicas}
        matches = self.index.match(hashes, [r.url for r in replicas], s.weights, min(l2.blocks, len(hashes)),
                                   l2_weight)
        total = prompt.token_count

        def cost(replica: Replica) -> tuple[float, int, str]:
            credit = matches[replica.url].credit * s.block_size
            return (replica.queued_prefill + max(0.0, total - credit) + s.inflight_cost * replica.in_flight,
                    replica.in_flight, replica.url)

        best = min(replicas, key=cost)
        least = least_loaded(replicas)
        reason = "kv" if matches[best.url].blocks else "least-loaded"
        if (best is not least and best.in_flight - least.in_flight > s.imbalance
                and best.in_flight > s.imbalance_ratio * least.in_flight):
            best, reason = least, "imbalance"
        match = matches[best.url]
        tiers = {tier: blocks * s.block_size for tier, blocks in match.tiers.items()}
        return Decision(best, self.name, reason, total, min(total, match.blocks * s.block_size), tiers)
