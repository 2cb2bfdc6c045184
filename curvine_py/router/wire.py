"""vLLM's KV cache event wire format (v0.33.0, `vllm/distributed/kv_events.py`), both ways.

PUB frames: `[topic, seq (u64 big-endian), payload]`. The payload is an `EventBatch`, always a
msgpack array `[ts, events, data_parallel_rank]`. Each event is, since vLLM PR #42892, a msgpack
map tagged by `"type"` with `omit_defaults` (required fields always present, nil included); older
vLLM (and v0.22/v0.23) sent tag-first positional arrays (`["BlockStored", hashes, parent, ...]`).
`decode_batch` accepts both, and unknown trailing fields, so a newer publisher does not break us.

The structs below mirror vLLM's field order, tags and defaults byte for byte as written in
../shared/notes/routing.md section 3.1 (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`); the
test replicas encode with them (`encode_batch(..., legacy=False)` -> the map dialect,
`legacy=True` -> the array dialect), the router only decodes.

Block hashes: vLLM sends the low 64 bits of the digest as an unsigned int; with
`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0` it sends the raw digest, which consumers fold to its last
8 bytes, big-endian (llm-d `vllm_adapter.go`, smg `kv_wire.rs`): `fold_hash`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

MEDIUMS = ("GPU", "CPU", "STORAGE")
END_SEQ = (-1).to_bytes(8, "big", signed=True)   # the replay socket's end marker
_MASK64 = (1 << 64) - 1


# -- vLLM's structs, mirrored (map dialect) ----------------------------------------------------
class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Base of the tagged union: encodes as a map with `"type": "<class name>"`."""


class BlockStored(KVCacheEvent):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None            # deprecated, still sent
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None    # LOCAL | REMOTE
    ownership: str | None = None   # the secondary tier's id
    session_id: str | None = None
    lookahead_token_ids: list[int] | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int | bytes]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


# -- the legacy positional-array dialect ------------------------------------------------------
class _LegacyEvent(msgspec.Struct, array_like=True, gc=False, tag=True):
    pass


class LegacyBlockStored(_LegacyEvent, tag="BlockStored"):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class LegacyBlockRemoved(_LegacyEvent, tag="BlockRemoved"):
    block_hashes: list[int | bytes]
    medium: str | None


class LegacyAllBlocksCleared(_LegacyEvent, tag="AllBlocksCleared"):
    pass


_ENCODER = msgspec.msgpack.Encoder()


def encode_batch(events: list[Any], ts: float, dp_rank: int | None = None) -> bytes:
    """The payload frame vLLM publishes (used by the test replicas and the bench)."""
    return _ENCODER.encode(EventBatch(ts=ts, events=events, data_parallel_rank=dp_rank))


# -- decoding (the router's side) --------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Event:
    """One decoded event, normalised: kind is stored | removed | cleared."""
    kind: str
    block_hashes: tuple[int, ...] = ()
    parent: int | None = None
    token_ids: tuple[int, ...] = ()
    block_size: int = 0
    medium: str = "GPU"
    locality: str | None = None
    group_idx: int | None = None


class WireError(ValueError):
    """A payload that is not a vLLM EventBatch in either dialect."""


def fold_hash(value: object) -> int:
    """A block hash as the 64-bit int vLLM publishes: ints keep their low 64 bits, raw digests fold
    to their last 8 bytes big-endian."""
    if isinstance(value, bool):
        raise WireError(f"block hash {value!r}")
    if isinstance(value, int):
        return value & _MASK64
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        return int.from_bytes(raw[-8:], "big")
    raise WireError(f"block hash of type {type(value).__name__}")


_STORED_ORDER = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                 "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window",
                 "locality", "ownership", "session_id", "lookahead_token_ids")
_REMOVED_ORDER = ("block_hashes", "medium", "group_idx", "locality", "ownership")


def _fields(raw: object) -> tuple[str, dict[str, Any]]:
    """(tag, fields by name) of one event in either dialect."""
    if isinstance(raw, dict):
        tag = raw.get("type")
        if not isinstance(tag, str):
            raise WireError("event map without a 'type' tag")
        return tag, raw
    if isinstance(raw, list) and raw and isinstance(raw[0], str):
        tag, values = raw[0], raw[1:]
        order = _STORED_ORDER if tag == "BlockStored" else _REMOVED_ORDER if tag == "BlockRemoved" else ()
        return tag, dict(zip(order, values, strict=False))
    raise WireError(f"event of shape {type(raw).__name__}")


def _medium(value: object) -> str:
    medium = value.upper() if isinstance(value, str) else "GPU"   # vLLM's default medium is the GPU
    return "CPU" if medium == "CPU_PINNED" else medium


def decode_event(raw: object) -> Event | None:
    """The event, or None for a tag this router does not know (skipped, not an error)."""
    tag, f = _fields(raw)
    if tag == "AllBlocksCleared":
        return Event("cleared")
    if tag not in ("BlockStored", "BlockRemoved"):
        return None
    hashes = f.get("block_hashes")
    if not isinstance(hashes, list):
        raise WireError(f"{tag} without block_hashes")
    block_hashes = tuple(fold_hash(h) for h in hashes)
    medium = _medium(f.get("medium"))
    locality = f.get("locality")
    locality = locality if isinstance(locality, str) else None
    group = f.get("group_idx")
    group = group if isinstance(group, int) else None
    if tag == "BlockRemoved":
        return Event("removed", block_hashes, medium=medium, locality=locality, group_idx=group)
    parent = f.get("parent_block_hash")
    tokens = f.get("token_ids") or []
    size = f.get("block_size")
    return Event("stored", block_hashes, parent=None if parent is None else fold_hash(parent),
                 token_ids=tuple(int(t) for t in tokens), block_size=size if isinstance(size, int) else 0,
                 medium=medium, locality=locality, group_idx=group)


def decode_batch(payload: bytes) -> tuple[float, list[Event], int | None]:
    """(ts, events, dp_rank) of one payload frame."""
    try:
        raw = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as exc:
        raise WireError(f"not msgpack: {exc}") from None
    if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[1], list):
        raise WireError("payload is not an EventBatch array [ts, events, dp_rank]")
    ts = float(raw[0]) if isinstance(raw[0], int | float) else 0.0
    rank = raw[2] if len(raw) > 2 and isinstance(raw[2], int) else None
    events = [e for e in (decode_event(item) for item in raw[1]) if e is not None]
    return ts, events, rank


def decode_seq(frame: bytes) -> int:
    """A seq frame: u64 big-endian, except the replay end marker (-1 as 8 signed bytes)."""
    if len(frame) != 8:
        raise WireError(f"seq frame of {len(frame)} bytes")
    return -1 if frame == END_SEQ else int.from_bytes(frame, "big")
