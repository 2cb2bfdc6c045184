"""The curvine-py L2 as the KV policy's STORAGE tier (`--l2-master`).

Per request: the prompt's LMCache chunk keys (blockhash.lmcache_keys, one TP rank), then the L2
pull API (`curvine_py.client.where`) for the stored prefix of those chunks and the nodes holding
them, in a thread, bounded by `--l2-timeout-ms` (a slow L2 costs the request that much, then
counts as a miss). The result is in vLLM blocks: a chunk of 256 tokens covers 16 blocks of 16.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from curvine_py.config import ClientConfig
from curvine_py.router.blockhash import lmcache_keys

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class L2Hit:
    blocks: int                       # vLLM blocks of the prompt's prefix that are in the L2
    hosts: frozenset[str] = frozenset()   # data-plane hosts and node names holding those chunks


class L2Lookup(Protocol):
    async def lookup(self, tokens: Sequence[int]) -> L2Hit: ...


class CurvineL2:
    def __init__(self, config: ClientConfig, *, model: str, block_size: int, seed: str, chunk_size: int = 256,
                 world_size: int = 1, dtype: str = "bfloat16", timeout_s: float = 0.05) -> None:
        from curvine_py.client import CurvineClient
        from curvine_py.client.where import L2Where
        self._client = CurvineClient(config=config)
        self._where = L2Where(self._client.membership, self._client.io, copies=self._client.kv.replicas + 1,
                              deadline_s=timeout_s)
        self.model, self.block_size, self.seed = model, block_size, seed
        self.chunk_size, self.world_size, self.dtype = chunk_size, world_size, dtype
        self.timeout_s = timeout_s

    def close(self) -> None:
        self._client.close()

    def _lookup(self, tokens: Sequence[int]) -> L2Hit:
        keys = lmcache_keys(tokens, model=self.model, world_size=self.world_size, dtype=self.dtype,
                            chunk_size=self.chunk_size, seed=self.seed)
        if not keys:
            return L2Hit(0)
        found = self._where.where(keys, prefix=True)
        hosts: set[str] = set()
        chunks = 0
        for residence in found:
            if not residence.stored:
                break
            chunks += 1
            hosts.update(residence.hosts)
            hosts.update(residence.nodes)
        return L2Hit(chunks * self.chunk_size // self.block_size, frozenset(hosts))

    async def lookup(self, tokens: Sequence[int]) -> L2Hit:
        try:
            return await asyncio.wait_for(asyncio.to_thread(self._lookup, tokens), self.timeout_s)
        except (TimeoutError, OSError) as exc:
            log.info("L2 lookup gave up (%s): counted as a miss", exc or "timeout")
            return L2Hit(0)
        except Exception as exc:     # the L2 must never fail a request: a miss
            log.warning("L2 lookup failed (%s): counted as a miss", exc)
            return L2Hit(0)
