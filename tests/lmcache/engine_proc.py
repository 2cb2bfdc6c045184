"""One real LMCache (0.5.6 or 0.5.7rc2) engine in its own process: the unit of every LMCache end-to-end test.

Run as ``python -m tests.lmcache.engine_proc '<job json>'`` (the harness does; see harness.py for
the job fields). It builds the engine the way vLLM's adapter does on a CPU box (notes/lmcache.md
4.2: LMCacheEngineConfig, LMCacheMetadata, CreateGPUConnector(..., EngineType.MOCK),
LMCacheEngineBuilder.get_or_create, post_init), runs the job's ops in order and prints exactly one
JSON line on stdout. Everything else LMCache prints goes to stderr.

The stock MockGPUConnector copies nothing (its from_gpu/to_gpu are no-ops), so stored bytes would
be whatever the allocator held. SeededConnector extends it: `store` copies KV bytes generated from
the seed (a function of token position only, so any process can regenerate them) and `retrieve`
copies into a destination buffer that is compared byte for byte.

Ops: ``store`` (engine.store of all tokens), ``flush`` (wait until every remote backend has no put
in flight: remote puts are fire-and-forget), ``lookup`` (prefix hit tokens), ``retrieve`` (tokens
retrieved + bit-exactness of the retrieved range), ``contains`` (per-chunk remote contains),
``miss`` (lookup of tokens from another seed, which nobody stored: must be 0), ``keys`` (the
chunk keys as stored remotely, CacheEngineKey.to_string()), ``reseed`` (switch to the next token
sequence and KV bytes: seed + RESEED_STEP, so one process can work on a second, fresh prefix),
``barrier`` (a rendezvous with the test while the engine stays alive, e.g. to restart a server
mid-run: writes the ops done so far to ``<barrier_dir>/reached-N`` and waits for
``<barrier_dir>/go-N``, N = 1, 2...).

The process ends with os._exit: RedisConnector/RESPConnector.close() deadlock in 0.5.6
(notes 4.3), and nothing here needs a clean engine teardown.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import traceback
from typing import Any

# Our stdout carries one JSON line; everything else (LMCache's logger, C extensions) goes to stderr.
_RESULT_FD = os.dup(1)
os.dup2(2, 1)
sys.stdout = sys.stderr

import torch

from curvine_py.lmcache.compat import check_remote_url, inprocess_module

MISS_SEED_OFFSET = 1_000_003
RESEED_STEP = 1_009
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
           "uint8": torch.uint8}


def _random_bytes(seed: int, n: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen)


def make_tokens(seed: int, n: int, vocab: int = 32000) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return [int(t) for t in torch.randint(0, vocab, (n,), generator=gen)]


def make_kv(seed: int, layers: int, tokens: int, hidden: int, dtype: torch.dtype) -> torch.Tensor:
    """The 'GPU' KV of the whole sequence in LMCache's KV_2LTD layout [2, L, T, H*D]. Random bits
    (any bit pattern, NaNs included), so only a byte comparison is meaningful."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = _random_bytes(seed * 7919 + 1, 2 * layers * tokens * hidden * itemsize)
    return raw.view(dtype).reshape(2, layers, tokens, hidden)


def _engine_classes() -> Any:
    MockGPUConnector = inprocess_module("gpu_connector.mock_gpu_connector").MockGPUConnector  # noqa: N806

    class SeededConnector(MockGPUConnector):  # type: ignore[misc]
        """MockGPUConnector that really moves bytes between the engine and two CPU buffers."""

        def __init__(self, kv_shape: tuple[int, ...], source: torch.Tensor, dest: torch.Tensor) -> None:
            super().__init__(kv_shape=kv_shape)
            self.source = source
            self.dest = dest

        def from_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
            memory_obj.tensor.copy_(self.source[:, :, start:end, :])

        def to_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
            self.dest[:, :, start:end, :].copy_(memory_obj.tensor)

        def batched_from_gpu(self, memory_objs: Any, starts: Any, ends: Any, **kwargs: Any) -> None:
            for obj, s, e in zip(memory_objs, starts, ends, strict=True):
                self.from_gpu(obj, s, e)

        def batched_to_gpu(self, memory_objs: Any, starts: Any, ends: Any, **kwargs: Any) -> None:
            for obj, s, e in zip(memory_objs, starts, ends, strict=True):
                self.to_gpu(obj, s, e)

    return SeededConnector


def _remote_backends(engine: Any) -> dict[str, Any]:
    from lmcache.v1.storage_backend.remote_backend import RemoteBackend
    backends = engine.storage_manager.storage_backends
    return {name: b for name, b in backends.items() if isinstance(b, RemoteBackend)}


class PutTracker:
    """Counts remote puts from submission to completion. RemoteBackend's own `put_tasks` misses
    batched puts (redis/resp connectors), so the connector's put/batched_put are wrapped: the
    count rises when the engine creates the coroutine (in the storing thread, before it is
    scheduled on LMCache's loop) and falls when it ends, so `flush` cannot pass too early."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.inflight = 0
        self.errors: list[str] = []

    def wrap(self, connection: Any) -> None:
        for name in ("put", "batched_put"):
            original = getattr(connection, name, None)
            if original is not None:
                setattr(connection, name, self._wrapped(original))

    def _wrapped(self, original: Any) -> Any:
        def submit(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.inflight += 1

            async def run() -> Any:
                try:
                    return await original(*args, **kwargs)
                except BaseException as exc:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    raise
                finally:
                    with self._lock:
                        self.inflight -= 1
            return run()
        return submit


def run(job: dict[str, Any]) -> dict[str, Any]:
    from lmcache.utils import EngineType, mock_up_broadcast_fn, mock_up_broadcast_object_fn
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.metadata import LMCacheMetadata

    # The in-process engine: lmcache.v1.* up to 0.5.6, lmcache.inprocess.v1.* from 0.5.7.
    LMCacheEngineBuilder = inprocess_module("cache_engine").LMCacheEngineBuilder  # noqa: N806
    CreateGPUConnector = inprocess_module("gpu_connector").CreateGPUConnector  # noqa: N806
    MockGPUConnector = inprocess_module("gpu_connector.mock_gpu_connector").MockGPUConnector  # noqa: N806

    model = job["model"]
    config_dict: dict[str, Any] = dict(job["config"])
    # lm:// on LMCache >= 0.5.7: one clear error (LMCache itself would run without a remote tier).
    check_remote_url(config_dict.get("remote_url"))
    chunk = int(config_dict.get("chunk_size", 256))
    n_tokens = int(job["tokens"])
    seed = int(job["seed"])
    dtype = _DTYPES[model["dtype"]]
    layers, heads, head_dim = int(model["layers"]), int(model["kv_heads"]), int(model["head_dim"])

    cfg = LMCacheEngineConfig.from_defaults(**config_dict)
    unknown = sorted(k for k in config_dict if k not in cfg._user_set_keys)
    if unknown:
        raise ValueError(f"unknown LMCache config keys: {unknown}")
    md = LMCacheMetadata(model_name=model["name"], world_size=int(model["world_size"]),
                         local_world_size=int(model["world_size"]), worker_id=int(model["worker_id"]),
                         local_worker_id=int(model["worker_id"]), kv_dtype=dtype,
                         kv_shape=(layers, 2, chunk, heads, head_dim), chunk_size=chunk)

    stock = CreateGPUConnector(cfg, md, EngineType.MOCK)
    assert isinstance(stock, MockGPUConnector), type(stock)
    kv_seed = seed if job.get("kv_seed") is None else int(job["kv_seed"])
    source = make_kv(kv_seed, layers, n_tokens, heads * head_dim, dtype)
    dest = torch.zeros_like(source)
    seeded = _engine_classes()(stock.kv_shape, source, dest)

    instance = f"curvine-test-{os.getpid()}"
    t0 = time.perf_counter()
    engine = LMCacheEngineBuilder.get_or_create(instance, cfg, md, seeded, mock_up_broadcast_fn,
                                                mock_up_broadcast_object_fn)
    engine.post_init()
    init_s = time.perf_counter() - t0
    tokens = torch.tensor(make_tokens(seed, n_tokens), dtype=torch.long)
    barriers = 0
    chunk_bytes = 2 * layers * chunk * heads * head_dim * source.element_size()
    remotes = _remote_backends(engine)
    tracker = PutTracker()
    for backend in remotes.values():
        if backend.connection is not None:
            tracker.wrap(backend.connection)
    result: dict[str, Any] = {
        "ok": True, "pid": os.getpid(), "init_seconds": init_s, "chunk_bytes": chunk_bytes,
        "tokens": n_tokens, "backends": list(engine.storage_manager.storage_backends),
        "hashseed": os.environ.get("PYTHONHASHSEED"), "ops": [],
    }
    if job.get("require_remote", True) and not remotes:
        raise RuntimeError(f"no remote backend was created (backends: {result['backends']})")

    for op in job["ops"]:
        t0 = time.perf_counter()
        entry: dict[str, Any] = {"op": op}
        if op == "store":
            engine.store(tokens)
            entry["bytes"] = (n_tokens // chunk) * chunk_bytes
        elif op == "flush":
            deadline = time.monotonic() + float(job.get("flush_timeout", 60))
            while tracker.inflight or any(b.put_tasks for b in remotes.values()):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{tracker.inflight} remote puts still in flight")
                time.sleep(0.005)
            entry["put_failed"] = len(tracker.errors) + sum(
                int(getattr(b, "_put_failed_count", 0)) for b in remotes.values())
            entry["put_errors"] = tracker.errors[:5]
        elif op == "lookup":
            entry["hit_tokens"] = int(engine.lookup(tokens))
        elif op == "miss":
            # Tokens nobody stored (another seed): every tier must answer 0.
            other = torch.tensor(make_tokens(seed + MISS_SEED_OFFSET, n_tokens), dtype=torch.long)
            entry["hit_tokens"] = int(engine.lookup(other))
        elif op == "keys":
            entry["keys"] = [key.to_string() for _, _, key in engine.token_database.process_tokens(tokens=tokens)]
        elif op == "reseed":
            seed += RESEED_STEP
            kv_seed += RESEED_STEP
            tokens = torch.tensor(make_tokens(seed, n_tokens), dtype=torch.long)
            source.copy_(make_kv(kv_seed, layers, n_tokens, heads * head_dim, dtype))
            entry["seed"] = seed
        elif op == "barrier":
            barriers += 1
            entry["barrier"] = barriers
            _rendezvous(str(job["barrier_dir"]), barriers, float(job.get("barrier_timeout", 120)),
                        result["ops"])
        elif op == "contains":
            keys = [key for _, _, key in engine.token_database.process_tokens(tokens=tokens)]
            entry["chunks"] = {name: [bool(b.contains(k)) for k in keys] for name, b in remotes.items()}
        elif op == "retrieve":
            dest.zero_()
            mask = engine.retrieve(tokens)
            hit = int(mask.sum())
            # A prefix hit: [0, hit) must equal the source byte for byte; the rest was not touched.
            got = dest[:, :, :hit, :].contiguous().view(torch.uint8)
            want = source[:, :, :hit, :].contiguous().view(torch.uint8)
            row = heads * head_dim * source.element_size()
            per_token = (got != want).reshape(2, layers, hit, row).any(dim=3).any(dim=1).any(dim=0)
            entry.update(hit_tokens=hit, bytes=(hit // chunk) * chunk_bytes,
                         prefix_mask=bool(mask[:hit].all()) and not bool(mask[hit:].any()),
                         mismatched_tokens=int(per_token.sum()),
                         bit_exact=bool(hit > 0 and per_token.sum() == 0))
        else:
            raise ValueError(f"unknown op {op!r}")
        entry["seconds"] = time.perf_counter() - t0
        result["ops"].append(entry)
    return result


def _rendezvous(directory: str, number: int, timeout: float, done: list[dict[str, Any]]) -> None:
    """Tells the test this engine reached barrier `number` (the marker holds the ops done so far,
    as JSON), then waits for its go."""
    marker = os.path.join(directory, f"reached-{number}")
    with open(marker + ".tmp", "w") as out:
        json.dump(done, out)
    os.replace(marker + ".tmp", marker)
    go = os.path.join(directory, f"go-{number}")
    deadline = time.monotonic() + timeout
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no go for barrier {number} within {timeout:.0f}s")
        time.sleep(0.01)


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        result = run(json.loads(argv[0]))
        code = 0
    except BaseException as exc:  # noqa: BLE001 - the harness always gets a JSON line
        traceback.print_exc()
        result, code = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, 1
    os.write(_RESULT_FD, (json.dumps(result) + "\n").encode())
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
