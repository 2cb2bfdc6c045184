"""Block hashes of a prompt, computed the way vLLM 0.33 and LMCache 0.5.6 compute them.

vLLM (`vllm/v1/core/kv_cache_utils.py`: `init_none_hash`, `hash_block_tokens`,
`get_request_block_hasher`; `vllm/utils/hashing.py`: `sha256_cbor`), with
`--prefix-caching-hash-algo sha256_cbor`:

- `sha256_cbor(x) = sha256(cbor2.dumps(x, canonical=True)).digest()` (32 bytes);
- `NONE_HASH = sha256_cbor(os.environ["PYTHONHASHSEED"])` (the seed *string*); unset, vLLM draws
  32 random bytes per process and no one outside that process can match its hashes;
- block i (only full blocks of `block_size` tokens are hashed):
  `h_i = sha256_cbor((h_{i-1} or NONE_HASH, tuple(tokens of block i), extra_keys))`, where
  `extra_keys` is None unless the request has a LoRA adapter, multimodal inputs, a cache salt
  (block 0 only) or prompt embeddings (`generate_block_hash_extra_keys`);
- KV events carry the low 64 bits: `int.from_bytes(h, "big") & (2**64 - 1)`
  (`maybe_convert_block_hash`).

The router supports plain text prompts and `cache_salt` (block 0's extra keys `(salt,)`); a LoRA
or multimodal request gets hashes vLLM would not produce, so it simply predicts no hit there.

LMCache 0.5.6 (`lmcache/v1/token_database.py`: `_hash_tokens`, `_normalize_hash_to_int`;
`lmcache/utils.py`: `CacheEngineKey.to_string`), with `pre_caching_hash_algorithm: sha256_cbor`:
`NONE = first 8 bytes of sha256_cbor(seed) as a big-endian int`; chunk i (of `chunk_size` = 256
tokens) `c_i = int(sha256_cbor((c_{i-1} or NONE, tuple(tokens), ()))[:8], big)`; the key string
`"{model}@{world_size}@{worker_id}@{c_i:x}@{dtype}"`.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import cbor2

_MASK64 = (1 << 64) - 1


def sha256_cbor(value: Any) -> bytes:
    return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()


def none_hash(seed: str) -> bytes:
    """vLLM's NONE_HASH for PYTHONHASHSEED=`seed` (sha256_cbor of the string)."""
    return sha256_cbor(seed)


def external(digest: bytes) -> int:
    """The 64-bit int a KV event carries for this block digest."""
    return int.from_bytes(digest, "big") & _MASK64


def block_digests(tokens: Sequence[int], block_size: int, seed: str,
                  cache_salt: str | None = None, limit: int | None = None) -> list[bytes]:
    """vLLM's digests of the prompt's full blocks, in order (at most `limit` blocks)."""
    if block_size <= 0:
        raise ValueError(f"block size {block_size}: must be positive")
    parent = none_hash(seed)
    digests: list[bytes] = []
    full = len(tokens) // block_size
    if limit is not None:
        full = min(full, limit)
    for index in range(full):
        chunk = tuple(int(t) for t in tokens[index * block_size:(index + 1) * block_size])
        extra = (cache_salt,) if index == 0 and cache_salt else None
        parent = sha256_cbor((parent, chunk, extra))
        digests.append(parent)
    return digests


def block_hashes(tokens: Sequence[int], block_size: int, seed: str,
                 cache_salt: str | None = None, limit: int | None = None) -> list[int]:
    """The KV-event block hashes (64-bit ints) of the prompt's full blocks."""
    return [external(d) for d in block_digests(tokens, block_size, seed, cache_salt, limit)]


def lmcache_chunk_hashes(tokens: Sequence[int], chunk_size: int, seed: str) -> list[int]:
    """LMCache 0.5.6's chunk hashes (sha256_cbor) of the prompt's full chunks."""
    if chunk_size <= 0:
        raise ValueError(f"chunk size {chunk_size}: must be positive")
    prefix = int.from_bytes(sha256_cbor(seed)[:8], "big")
    hashes = []
    for index in range(len(tokens) // chunk_size):
        chunk = tuple(int(t) for t in tokens[index * chunk_size:(index + 1) * chunk_size])
        prefix = int.from_bytes(sha256_cbor((prefix, chunk, ()))[:8], "big")
        hashes.append(prefix)
    return hashes


def lmcache_keys(tokens: Sequence[int], *, model: str, world_size: int = 1, worker_id: int = 0,
                 dtype: str = "bfloat16", chunk_size: int = 256, seed: str) -> list[str]:
    """The L2 object keys LMCache 0.5.6 stores for the prompt's full chunks (one TP rank)."""
    return [f"{model}@{world_size}@{worker_id}@{h:x}@{dtype}"
            for h in lmcache_chunk_hashes(tokens, chunk_size, seed)]
