"""Wire format, hashing, index and policies without processes."""
from __future__ import annotations

import asyncio
import hashlib

import cbor2
import msgspec

from curvine_py.router import blockhash, wire
from curvine_py.router.index import KVIndex
from curvine_py.router.policies import KVAware, KVSettings, PrefixAware, RoundRobin
from curvine_py.router.prompt import Prompt, PromptReader
from curvine_py.router.replicas import Replica, ReplicaSet, dns_replicas, watch_dns
from tests.router import vllm_wire


def test_map_dialect_is_a_tagged_map_and_decodes() -> None:
    event = vllm_wire.stored([7, 8], [1, 2, 3, 4, 5, 6, 7, 8], 4, "CPU")
    payload = msgspec.msgpack.encode(vllm_wire.EventBatch(1.5, [event, vllm_wire.AllBlocksCleared()]))
    raw = msgspec.msgpack.decode(payload)
    # byte for byte as the notes say: [ts, [events], dp_rank?] with each event a map tagged by "type",
    # required fields present even when nil, defaults omitted
    assert raw[0] == 1.5 and raw[1][0] == {"type": "BlockStored", "block_hashes": [7, 8], "parent_block_hash": None,
                                           "token_ids": [1, 2, 3, 4, 5, 6, 7, 8], "block_size": 4, "lora_id": None,
                                           "medium": "CPU", "lora_name": None}
    assert raw[1][1] == {"type": "AllBlocksCleared"}
    ts, events, rank = wire.decode_batch(payload)
    assert ts == 1.5 and rank is None
    assert events[0].kind == "stored" and events[0].block_hashes == (7, 8) and events[0].medium == "CPU"
    assert events[1].kind == "cleared"


def test_legacy_array_dialect_decodes() -> None:
    payload = msgspec.msgpack.encode(vllm_wire.EventBatch(2.0, [vllm_wire.stored([9], [1, 2, 3, 4], 4, legacy=True),
                                                                vllm_wire.removed([9], "GPU", legacy=True)], 0))
    raw = msgspec.msgpack.decode(payload)
    assert raw[1][0] == ["BlockStored", [9], None, [1, 2, 3, 4], 4, None, "GPU"]
    _, events, rank = wire.decode_batch(payload)
    assert rank == 0
    assert [(e.kind, e.block_hashes, e.medium) for e in events] == [("stored", (9,), "GPU"), ("removed", (9,), "GPU")]


def test_router_structs_encode_what_the_test_structs_encode() -> None:
    mine = wire.BlockStored([1], None, [1, 2], 2, None, "GPU", None, locality="REMOTE")
    theirs = vllm_wire.BlockStored([1], None, [1, 2], 2, None, "GPU", None, locality="REMOTE")
    assert msgspec.msgpack.encode(mine) == msgspec.msgpack.encode(theirs)
    legacy = wire.LegacyBlockStored([1], None, [1, 2], 2, None, "GPU")
    assert msgspec.msgpack.encode(legacy) == msgspec.msgpack.encode(vllm_wire.stored([1], [1, 2], 2, legacy=True))


def test_hash_folding_and_unknown_events() -> None:
    digest = bytes(range(32))
    assert wire.fold_hash(digest) == int.from_bytes(digest[-8:], "big")
    assert wire.fold_hash(1 << 70 | 5) == 5
    assert wire.decode_event({"type": "SomethingNew", "x": 1}) is None
    assert wire.decode_event({"type": "BlockRemoved", "block_hashes": [1], "medium": "CPU_PINNED"}).medium == "CPU"
    assert wire.decode_seq(wire.END_SEQ) == -1 and wire.decode_seq((5).to_bytes(8, "big")) == 5


def test_vllm_block_hashes() -> None:
    tokens = list(range(10))
    none = hashlib.sha256(cbor2.dumps("0", canonical=True)).digest()
    h0 = hashlib.sha256(cbor2.dumps((none, (0, 1, 2, 3), None), canonical=True)).digest()
    h1 = hashlib.sha256(cbor2.dumps((h0, (4, 5, 6, 7), None), canonical=True)).digest()
    assert blockhash.block_digests(tokens, 4, "0") == [h0, h1]       # the partial block is not hashed
    assert blockhash.block_hashes(tokens, 4, "0") == [int.from_bytes(h, "big") & (2**64 - 1) for h in (h0, h1)]
    assert blockhash.block_hashes(tokens, 4, "0") == vllm_wire.vllm_block_hashes(tokens, 4, "0")
    salted = blockhash.block_digests(tokens, 4, "0", cache_salt="s")
    assert salted[0] == hashlib.sha256(cbor2.dumps((none, (0, 1, 2, 3), ("s",)), canonical=True)).digest()
    assert blockhash.block_hashes(tokens, 4, "1") != blockhash.block_hashes(tokens, 4, "0")


def test_lmcache_keys() -> None:
    tokens = list(range(8))
    none = int.from_bytes(hashlib.sha256(cbor2.dumps("0", canonical=True)).digest()[:8], "big")
    c0 = int.from_bytes(hashlib.sha256(cbor2.dumps((none, (0, 1, 2, 3), ()), canonical=True)).digest()[:8], "big")
    keys = blockhash.lmcache_keys(tokens, model="m/x", chunk_size=4, seed="0")
    assert len(keys) == 2 and keys[0] == f"m/x@1@0@{c0:x}@bfloat16"


def test_index_longest_prefix_by_tier() -> None:
    index = KVIndex()
    index.stored("a", [1, 2, 3], "GPU")
    index.stored("b", [1], "GPU")
    index.stored("b", [2, 3, 4], "CPU")
    index.stored("c", [1, 2, 3, 4], "STORAGE", remote=True)     # a shared pool: every replica
    m = index.match([1, 2, 3, 4, 5], ["a", "b", "d"])
    assert (m["a"].blocks, m["a"].credit) == (4, 3.5)            # 3 GPU + block 4 from the shared pool
    assert m["b"].blocks == 4 and abs(m["b"].credit - (1 + 0.8 * 3)) < 1e-9
    assert m["d"].blocks == 4 and m["d"].tiers == {"STORAGE": 4}
    index.removed("c", [1], "STORAGE", remote=True)
    assert index.match([1, 2], ["d"])["d"].blocks == 0           # consecutive: block 1 is gone
    assert index.clear("a") == 3 and index.match([1], ["a"])["a"].blocks == 0


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_round_robin_and_prefix_bounded_load() -> None:
    reps = [Replica(f"http://r{i}:1") for i in range(3)]
    rr = RoundRobin()
    picks = [run(rr.choose(Prompt("x", None), reps)).replica.url for _ in range(6)]
    assert picks == sorted(r.url for r in reps) * 2
    prefix = PrefixAware(block_size=4, blocks=2, load_factor=1.25)
    prompt = Prompt(None, tuple(range(32)))
    first = run(prefix.choose(prompt, reps))
    assert first.reason == "prefix"
    assert run(prefix.choose(Prompt(None, tuple(range(8)) + (99,) * 24), reps)).replica is first.replica
    first.replica.in_flight = 5     # over ceil(1.25 * 6 / 3) = 3: the next in rendezvous order takes it
    spilled = run(prefix.choose(prompt, reps))
    assert spilled.reason == "spill" and spilled.replica is not first.replica


def test_kv_policy_prefers_the_holder_and_guards_imbalance() -> None:
    index = KVIndex()
    settings = KVSettings(block_size=4, seed="0", imbalance=2, imbalance_ratio=1.5, inflight_cost=0)
    tokens = tuple(range(16))
    index.stored("http://b:1", blockhash.block_hashes(tokens, 4, "0"), "GPU")
    a, b = Replica("http://a:1"), Replica("http://b:1")
    policy = KVAware(index, settings)
    d = run(policy.choose(Prompt(None, tokens), [a, b]))
    assert d.replica is b and d.reason == "kv" and d.hit_tokens == 16 and d.tiers == {"GPU": 16}
    b.in_flight = 3                 # 3 above a (0) and over 1.5x: the least loaded wins
    d = run(policy.choose(Prompt(None, tokens), [a, b]))
    assert d.replica is a and d.reason == "imbalance" and d.hit_tokens == 0
    b.in_flight = 1
    assert run(policy.choose(Prompt(None, tokens + (1, 2, 3, 4)), [a, b])).replica is b


def test_prompt_reader(tokenizer_file: str) -> None:
    reader = PromptReader.from_file(tokenizer_file)
    p = reader.read("/v1/completions", {"prompt": "w1 w2 nope"})
    assert p.tokens == (2, 3, 0)
    assert reader.read("/v1/completions", {"prompt": [5, 6]}).tokens == (5, 6)
    assert reader.read("/v1/completions", {"prompt": ["w1", "w2"]}).tokens == (2,)
    chat = reader.read("/v1/chat/completions", {"messages": [{"role": "user", "content": "w1"}], "cache_salt": "t"})
    assert chat.text == "<|im_start|>user\nw1<|im_end|>\n<|im_start|>assistant\n" and chat.cache_salt == "t"


def test_dns_watch_follows_the_records() -> None:
    answers = [["10.0.0.1", "10.0.0.2"], OSError("no server"), ["10.0.0.2", "10.0.0.3"]]
    replicas = ReplicaSet()

    async def resolver(name: str, port: int) -> list[str]:
        assert (name, port) == ("vllm.ns.svc", 8000)
        answer = answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        return answer

    seen: list[list[str]] = []

    async def sleep(_: float) -> None:
        seen.append(sorted(r.url for r in replicas.all()))
        if not answers:
            raise asyncio.CancelledError

    try:
        run(watch_dns(replicas, "vllm.ns.svc:8000", interval_s=1, events_port=5557, replay_port=None,
                      resolver=resolver, sleep=sleep))
    except asyncio.CancelledError:
        pass
    assert seen == [["http://10.0.0.1:8000", "http://10.0.0.2:8000"]] * 2 + [["http://10.0.0.2:8000", "http://10.0.0.3:8000"]]
    assert dns_replicas(["10.0.0.9"], 80, 5557, 5558)[0].kv_replay == "tcp://10.0.0.9:5558"
