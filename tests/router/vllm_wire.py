"""vLLM 0.33's KV event structs for the test replicas, written from ../shared/notes/routing.md
section 3.1 independently of the router's decoder (curvine_py/router/wire.py), so a mistake in
one does not hide in the other: field order, tags and defaults as vLLM's `kv_events.py` declares
them. `EventBatch` is array_like; events are tagged maps (`"type"`, omit_defaults) since vLLM
PR #42892, tag-first arrays before it (the `Legacy*` structs).

Block hashes as vLLM computes them (`vllm/v1/core/kv_cache_utils.py` hash_block_tokens with
`vllm/utils/hashing.py` sha256_cbor), again written here on their own.
"""
from __future__ import annotations

import hashlib
from typing import Any

import cbor2
import msgspec


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[int] | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class LegacyEvent(msgspec.Struct, array_like=True, gc=False, tag=True):
    pass


class LegacyBlockStored(LegacyEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class LegacyBlockRemoved(LegacyEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None


def vllm_block_hashes(tokens: list[int], block_size: int, seed: str) -> list[int]:
    def h(x: Any) -> bytes:
        return hashlib.sha256(cbor2.dumps(x, canonical=True)).digest()
    parent = h(seed)
    out = []
    for i in range(len(tokens) // block_size):
        parent = h((parent, tuple(tokens[i * block_size:(i + 1) * block_size]), None))
        out.append(int.from_bytes(parent, "big") & ((1 << 64) - 1))
    return out


def stored(hashes: list[int], tokens: list[int], block_size: int, medium: str = "GPU", *,
           legacy: bool = False, parent: int | None = None) -> Any:
    if legacy:
        return LegacyBlockStored(hashes, parent, tokens, block_size, None, medium)
    return BlockStored(hashes, parent, tokens, block_size, None, medium, None)


def removed(hashes: list[int], medium: str = "GPU", *, legacy: bool = False) -> Any:
    return LegacyBlockRemoved(hashes, medium) if legacy else BlockRemoved(hashes, medium)
