"""`curvine-py bench lmcache`: KV chunks through LMCache 0.5.6's own connectors, all in one run.

Part 1, 32 MiB chunks (Llama-3-8B: 256 tokens x 32 layers x 8 KV heads x 128 x bf16), every
server on loopback, the client a separate process (`--child`) holding the real LMCache objects
(LMCacheEngineConfig, LocalCPUBackend, RemoteBackend, the connector LMCache creates for the URL or
plugin), timing what LMCache's storage manager calls:

    put  RemoteBackend.batched_submit_put_task(keys, objs) until every key's completion callback,
         then one contains(last key) round trip (lm:// PUTs have no reply: this makes every backend
         "stored and visible")
    get  RemoteBackend.batched_get_blocking(keys): the synchronous retrieve path, into LocalCPU
         memory objects (verified against the source bytes after the clock stops)

Backends: curvine's native plugin (remote_storage_plugins, over TCP; and on the worker's own node,
where the client reads by short-circuit), curvine's `lm://` worker port, `fs://` over the curvine
FUSE mount, LMCache's stock `lm://` server (`python -m lmcache.v1.server`), Redis (Debian
redis-server, `redis://`). Baseline, measured in the same repeat (before and after the backends,
averaged): the raw socket pair, one connection, a separate process `os.sendfile`s a file of the
chunk's size (page cache) per request and the client `recv_into`s a page-aligned mmap (put: sendall
-> recv_into mmap + a 1-byte ack). Also LMCache's MP-mode tool on the L2 adapters alone (`lmcache
bench l2`, 32 MiB values): curvine's native_plugin vs the stock resp adapter on the same Redis.

Part 2, the reference scenario: a 1,925-token Qwen2-7B-class prompt (7 full chunks of 256 tokens,
28 layers x 4 KV heads x 128 x bf16 = 14 MiB each, 0.103 GB) retrieved by the native plugin from
a worker in another network namespace (tests/netns.py: a veth link through a bridge), beside the
reference's 55.75 ms and as a ratio of the raw pair's time for the same 7 x 14 MiB over the same
link (raw server in the worker's namespace, reading a file on the same filesystem).

Like with like: every backend gets the same `count` fresh keys per sample; one untimed warm-up
sample per backend first opens its connections (the curvine plugin's pool, the stock connector's
one socket, redis-py's pool) and warms the servers; the order rotates every repeat; connectors run
with LMCache's defaults and the curvine plugin with its own shipped default (num_workers 4: up to 4
chunks in flight on pooled connections, where the stock lm connector is serial by design).
Congestion control: every process keeps the host's default (BBR on the bench machine) except that
the curvine worker, the curvine client and both ends of the raw pair switch loopback connections to
Reno (transport/blocking.py set_local_options: BBR's pacing costs loopback more than half its
throughput). The stock lm server and Redis run as shipped (a probe of the stock server patched to
do the same is in docs/lmcache.md); across the veth link nobody switches.

Targets: native get >= 2x Redis get and >= 1x the stock lm server's; scenario <= 1.15x raw time.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench import common
from bench.lmcache_report import LABELS, ratio_between, render, summarize
from bench.rawpair import process_cpu, raw_server

MiB = common.MiB
REFERENCE_MS = 55.75
TOKEN = "bench-lmcache-token"
TARGETS = {"native_vs_redis_get": 2.0, "native_vs_stock_lm_get": 1.0, "scenario_vs_raw_time": 1.15}

# KV geometry of one 256-token chunk (KV_2LTD: [2, layers, 256, kv_heads * head_dim], bf16).
LLAMA_8B = {"model": "bench/llama-3-8b", "layers": 32, "kv_heads": 8, "head_dim": 128}        # 32 MiB
QWEN2_7B = {"model": "bench/qwen2-7b", "layers": 28, "kv_heads": 4, "head_dim": 128}          # 14 MiB
SCENARIO_TOKENS = 1925
CHUNK_TOKENS = 256


def chunk_bytes(geometry: dict[str, Any]) -> int:
    return int(2 * geometry["layers"] * CHUNK_TOKENS * geometry["kv_heads"] * geometry["head_dim"] * 2)


class Rig:
    """What a measuring child needs of LMCache, built once: the chunk's metadata, a CPU backend with
    room for `cpu_chunks` chunks, its event loop, `count` source chunks of seeded random bytes with
    their digests, and `build` for a RemoteBackend of one entry of the spec's backends."""

    def __init__(self, geometry: dict[str, Any], count: int, *, cpu_chunks: int, seed: int) -> None:
        import asyncio
        import threading

        import torch
        import xxhash
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.metadata import LMCacheMetadata
        from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

        size = chunk_bytes(geometry)
        self.md = LMCacheMetadata(
            model_name=geometry["model"], world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
            kv_dtype=torch.bfloat16,
            kv_shape=(geometry["layers"], 2, CHUNK_TOKENS, geometry["kv_heads"], geometry["head_dim"]),
            chunk_size=CHUNK_TOKENS)
        self.cpu_gb = cpu_chunks * size / 1e9 + 0.2
        base = LMCacheEngineConfig.from_defaults(chunk_size=CHUNK_TOKENS, local_cpu=False,
                                                 max_local_cpu_size=self.cpu_gb, remote_serde="naive")
        self.cpu = LocalCPUBackend(base, self.md, dst_device="cpu")
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="lmcache-loop").start()
        self.sources: list[Any] = []
        for index in range(count):
            obj = self.cpu.allocate(self.md.get_shapes(), self.md.get_dtypes())
            assert obj is not None and obj.tensor is not None
            gen = torch.Generator().manual_seed(seed + index)
            obj.tensor.view(torch.uint8).view(-1).copy_(torch.randint(0, 256, (size,), dtype=torch.uint8,
                                                                      generator=gen))
            self.sources.append(obj)
        self.digests = [xxhash.xxh3_64_intdigest(memoryview(obj.byte_array).cast("B")) for obj in self.sources]
        self._model, self._serial = geometry["model"], iter(range(1, 1 << 62))

    def keys(self) -> list[Any]:
        """Chunk hashes unique per call: every put stores new objects (no write-once shortcut)."""
        import torch
        from lmcache.utils import CacheEngineKey

        salt = next(self._serial) << 8
        return [CacheEngineKey(self._model, 1, 0, salt + i, torch.bfloat16) for i in range(len(self.sources))]

    def put(self, name: str, backend: Any, keys: list[Any]) -> None:
        """The sources under `keys` through `backend`, returning once every put completed."""
        import threading

        done = threading.Semaphore(0)
        backend.batched_submit_put_task(keys, self.sources, on_complete_callback=lambda _key: done.release())
        for _ in keys:
            if not done.acquire(timeout=120):
                raise TimeoutError(f"{name}: put did not complete")

    def verify(self, name: str, got: list[Any]) -> None:
        """Raises unless `got` (a get of keys put from the sources) is every source, byte for byte."""
        import xxhash

        for index, obj in enumerate(got):
            if obj is None:
                raise RuntimeError(f"{name}: chunk {index} missing on get")
            if xxhash.xxh3_64_intdigest(memoryview(obj.byte_array).cast("B")) != self.digests[index]:
                raise RuntimeError(f"{name}: chunk {index} came back different")

    @staticmethod
    def release(got: list[Any]) -> None:
        for obj in got:
            if obj is not None:
                obj.ref_count_down()

    def build(self, entry: dict[str, Any]) -> Any:
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.storage_backend.remote_backend import RemoteBackend

        config = LMCacheEngineConfig.from_defaults(
            chunk_size=CHUNK_TOKENS, local_cpu=False, max_local_cpu_size=self.cpu_gb, remote_serde="naive",
            remote_url=entry.get("url"), remote_storage_plugins=entry.get("plugins"),
            extra_config=entry.get("extra_config"))
        plugin = entry["plugins"][0] if entry.get("plugins") else None
        backend = RemoteBackend(config, self.md, self.loop, self.cpu, dst_device="cpu", plugin_name=plugin)
        if backend.connection is None:
            raise RuntimeError(f"{entry['name']}: LMCache created no connection")
        return backend


# -- the measuring child (real LMCache objects) --------------------------------------------------
def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs in its own process: builds one RemoteBackend per backend (sharing one LocalCPUBackend
    and one event loop, as in an engine) and measures them against the raw pair, interleaved."""
    import mmap
    import socket
    import struct

    from lmcache.v1.storage_backend.remote_backend import RemoteBackend

    from curvine_py.transport.blocking import set_local_options

    geometry, count, repeats = spec["geometry"], int(spec["count"]), int(spec["repeats"])
    size = chunk_bytes(geometry)
    rig = Rig(geometry, count, cpu_chunks=2 * count + 2, seed=1000)
    sources, build = rig.sources, rig.build

    backends = {entry["name"]: build(entry) for entry in spec["backends"]}
    # Objects the connector cannot delete (lm:// has no delete) but curvine can: removed through a
    # client after each sample, so written data never piles up in the worker's page cache (dirty
    # pages written back under the next samples would be measured, not the path).
    cleaners: dict[str, Any] = {}
    for entry in spec["backends"]:
        if entry.get("cleanup_master"):
            from curvine_py.client import CurvineClient
            cleaners[entry["name"]] = CurvineClient(entry["cleanup_master"], token=entry.get("cleanup_token", ""),
                                                    node="bench-cleanup").kv
    def sample(name: str, backend: RemoteBackend) -> dict[str, float]:
        keys = rig.keys()
        t0 = time.perf_counter()
        rig.put(name, backend, keys)
        if not backend.contains(keys[-1]):
            raise RuntimeError(f"{name}: the last chunk put is not visible")
        t1 = time.perf_counter()
        hits = backend.batched_contains(keys)
        t2 = time.perf_counter()
        cpu0 = cpu_now(name)
        got = backend.batched_get_blocking(keys)
        t3 = time.perf_counter()
        cpu1 = cpu_now(name)
        try:
            if hits != count:
                raise RuntimeError(f"{name}: batched contains found {hits} of {count}")
            if len(got) != count:
                raise RuntimeError(f"{name}: {len(got)} chunks came back of {count}")
            rig.verify(name, got)
        finally:
            rig.release(got)
            for key in keys:   # keep servers small (the stock lm server and Redis' connector cannot delete)
                with contextlib.suppress(Exception):
                    if name in cleaners:
                        cleaners[name].delete(key.to_string())
                    else:
                        backend.connection.remove_sync(key)
        return {"put_s": t1 - t0, "contains_s": t2 - t1, "get_s": t3 - t2,
                "get_client_cpu_s": cpu1[0] - cpu0[0], "get_server_cpu_s": cpu1[1] - cpu0[1]}

    # CPU seconds (this process, the serving process) around each get: where the time goes.
    server_pids: dict[str, int] = {k: int(v) for k, v in spec.get("server_pids", {}).items()}

    def cpu_now(name: str) -> tuple[float, float]:
        pid = server_pids.get(name)
        return process_cpu(os.getpid()), (process_cpu(pid) if pid else 0.0)

    request = struct.Struct("<cQ")
    raw_sock = socket.create_connection((spec["raw"][0], int(spec["raw"][1])))
    raw_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # Reno on loopback, as our client and the raw server do (transport.blocking.set_local_options):
    # the raw put's sender is this socket, and the native plugin's put sender uses Reno too.
    set_local_options(raw_sock)
    raw_in = memoryview(mmap.mmap(-1, size))
    raw_out = memoryview(mmap.mmap(-1, size))
    raw_out[:] = os.urandom(size)

    def raw_sample() -> dict[str, float]:
        cpu0 = cpu_now("raw")
        t0 = time.perf_counter()
        for _ in range(count):
            raw_sock.sendall(request.pack(b"G", size))
            got = 0
            while got < size:
                n = raw_sock.recv_into(raw_in[got:], size - got)
                if n == 0:
                    raise EOFError("raw server went away")
                got += n
        t1 = time.perf_counter()
        cpu1 = cpu_now("raw")
        for _ in range(count):
            raw_sock.sendall(request.pack(b"P", size))
            raw_sock.sendall(raw_out)
            if raw_sock.recv(1) != b"K":
                raise EOFError("raw server went away")
        t2 = time.perf_counter()
        return {"get_s": t1 - t0, "put_s": t2 - t1,
                "get_client_cpu_s": cpu1[0] - cpu0[0], "get_server_cpu_s": cpu1[1] - cpu0[1]}

    # Warm-up: connections, pools, the raw file in the page cache, server-side allocations.
    raw_sample()
    for name, backend in backends.items():
        sample(name, backend)

    out: dict[str, Any] = {"bytes_per_sample": count * size, "chunk_bytes": size, "raw": [],
                           "backends": {name: [] for name in backends}}
    names = list(backends)
    for r in range(repeats):
        before = raw_sample()
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            out["backends"][name].append(sample(name, backends[name]))
        after = raw_sample()
        out["raw"].append({k: (before[k] + after[k]) / 2 for k in before})
        print(f"  repeat {r + 1}/{repeats} done", file=sys.stderr, flush=True)
    for obj in sources:
        obj.ref_count_down()
    return out


def child_main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    result_fd = os.dup(1)
    os.dup2(2, 1)    # LMCache and C extensions print on stdout; our stdout carries one JSON line
    try:
        result = {"ok": True, **child(spec)}
        code = 0
    except BaseException as exc:  # noqa: BLE001 - the parent always gets a JSON line
        import traceback
        traceback.print_exc()
        result, code = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, 1
    os.write(result_fd, (json.dumps(result) + "\n").encode())
    sys.stderr.flush()
    os._exit(code)   # RedisConnector.close() deadlocks in 0.5.6: no teardown


def run_child(spec: dict[str, Any], *, timeout: float = 1800.0) -> dict[str, Any]:
    from tests.lmcache.harness import lmcache_env

    proc = subprocess.run([sys.executable, "-m", "bench.lmcache", "--child", json.dumps(spec)], cwd=common.REPO,
                          env=lmcache_env(), stdout=subprocess.PIPE, text=True, timeout=timeout, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {"ok": False, "error": "no JSON line"}
    if not result.get("ok"):
        raise SystemExit(f"bench child failed (rc={proc.returncode}): {result.get('error')}")
    return result


# -- the servers -----------------------------------------------------------------------------------
def _pid(server: Any) -> int:
    return int(server.process.pid) if server.process is not None else 0


def plugin_entry(name: str, master: str, *, node: str, token: str = "", batch_streams: int = 0) -> dict[str, Any]:
    prefix = "remote_storage_plugin.curvine."
    extra = {prefix + "module_path": "curvine_py.lmcache.connector",
             prefix + "class_name": "CurvineConnectorAdapter", prefix + "master": master, prefix + "node": node}
    if token:
        extra[prefix + "token"] = token
    if batch_streams:
        extra[prefix + "batch_streams"] = str(batch_streams)
    return {"name": name, "plugins": ["curvine"], "extra_config": extra}


def part1(root: pathlib.Path, args: Any) -> dict[str, Any]:
    from curvine_py.core.domain import Policy, StorageClass
    from tests.fuse.mounts import Mount
    from tests.harness import Cluster
    from tests.lmcache.harness import RedisServer, StockLMServer, run_l2_bench

    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(Cluster(root / "cluster", workers=1, node_names=["bench-worker"],
                                              worker_args=["--lm-port", "-1"]))
        cluster.wait_for_live_workers(1)
        worker = cluster.workers[0]
        assert worker is not None
        stock = stack.enter_context(StockLMServer())
        redis = stack.enter_context(RedisServer())
        raw = stack.enter_context(raw_server("127.0.0.1", root / "raw"))
        backends = [
            plugin_entry("native", cluster.master_address, node="bench-client"),
            plugin_entry("native_local", cluster.master_address, node="bench-worker"),
            {"name": "lm_curvine", "url": f"lm://{worker.field('lm')}", "cleanup_master": cluster.master_address},
        ]
        if not args.no_fs:
            client = cluster.client()
            client.fs.mkdir("/lmcache")
            client.fs.set_policy("/lmcache", Policy(storage_class=StorageClass.CACHE))
            mnt = root / "mnt"
            stack.enter_context(Mount(cluster.master_address, mnt, args=["--node", "bench-client"]))
            backends.append({"name": "fs_curvine", "url": f"fs://localhost:0{mnt}/lmcache"})
        backends += [{"name": "lm_stock", "url": stock.url}, {"name": "redis", "url": redis.url}]
        if args.backends:
            wanted = set(args.backends.split(","))
            backends = [b for b in backends if b["name"] in wanted]
        worker_pid = worker.process.pid
        # (fs:// is served by the mount and the worker together: no single server process to meter)
        pids = {"raw": raw[2], "native": worker_pid, "native_local": worker_pid, "lm_curvine": worker_pid,
                "lm_stock": _pid(stock), "redis": _pid(redis)}
        spec = {"geometry": LLAMA_8B, "count": args.count, "repeats": args.repeats, "raw": list(raw[:2]),
                "backends": backends, "server_pids": pids}
        print(f"part 1: {len(backends)} backends x {args.count} chunks of {chunk_bytes(LLAMA_8B) >> 20} MiB, "
              f"{args.repeats} repeats", file=sys.stderr, flush=True)
        result = run_child(spec)
        result["mp_l2"] = {}
        if not args.no_mp:
            adapters: dict[str, dict[str, Any]] = {
                "native_plugin": {"type": "native_plugin", "module_path": "curvine_py.lmcache.native",
                                  "class_name": "CurvineNativeConnector",
                                  "adapter_params": {"master": cluster.master_address, "node": "bench-client"}},
                "resp": {"type": "resp", "host": redis.host, "port": redis.port, "num_workers": 8},
            }
            for name, adapter in adapters.items():
                print(f"part 1: lmcache bench l2 ({name})", file=sys.stderr, flush=True)
                tool = run_l2_bench(adapter, num_keys=args.count, in_flight=1, data_size_kb=32 * 1024,
                                    rounds=args.repeats, timeout=900)
                if not tool.ok:
                    raise SystemExit(f"lmcache bench l2 ({name}) failed:\n{tool.describe()}")
                ops = {op["operation"]: op for key, op in tool.metrics.items() if key.startswith("op_")}
                result["mp_l2"][name] = {op: {"gbps": ops[op]["throughput_avg_mbps"] * 1e6 / 1e9 * 1.048576,
                                              "mbps_reported": ops[op]["throughput_avg_mbps"]}
                                         for op in ("Store", "Load")}
                redis.command("FLUSHALL")
        return result


def remote(root: pathlib.Path, args: Any, *, geometry: dict[str, Any], count: int, repeats: int,
           baselines: bool) -> dict[str, Any]:
    """Across a veth link: worker + raw server (+ stock lm server and Redis with `baselines`) in
    namespace 0, master on the bridge address, the LMCache client (the child) in the root
    namespace."""
    from curvine_py.procs import curvine_command, start
    from tests.harness import Cluster
    from tests.lmcache.harness import RedisServer, StockLMServer
    from tests.netns import network_namespaces

    with contextlib.ExitStack() as stack:
        lab = stack.enter_context(network_namespaces(1))
        ns = lab[0]
        cluster = stack.enter_context(Cluster(root / f"cluster-{geometry['model'].rsplit('/', 1)[1]}", workers=0,
                                              token=TOKEN, host=lab.root_address))
        data = root / f"scenario-{geometry['model'].rsplit('/', 1)[1]}"
        data.mkdir(parents=True)
        worker = start("scenario-worker", [*ns.prefix, *curvine_command(
            "worker", "--master", cluster.master_address, "--data-dir", str(data), "--host", ns.address,
            "--port", "0", "--node", "ns-worker", "--token", TOKEN, "--lm-port", "-1",
            # the bench client is in another namespace: a reachable lm:// port, on purpose
            "--lm-host", ns.address, "--lm-insecure")], ready_prefix="worker=")
        stack.callback(worker.stop)
        cluster.wait_for_live_workers(1)
        raw = stack.enter_context(raw_server(ns.address, data / "raw", prefix=ns.prefix))
        backends = [plugin_entry("native", cluster.master_address, node="bench-client", token=TOKEN)]
        # --streams-sweep: the same plugin with other batch_streams, rotated in the same repeats
        backends += [plugin_entry(f"native_s{n}", cluster.master_address, node="bench-client", token=TOKEN,
                                  batch_streams=n) for n in args.streams_sweep]
        backends += [{"name": "lm_curvine", "url": f"lm://{worker.field('lm')}",
                     "cleanup_master": cluster.master_address, "cleanup_token": TOKEN}]
        if baselines:
            stock = stack.enter_context(StockLMServer(host=ns.address, prefix=ns.prefix))
            redis = stack.enter_context(RedisServer(host=ns.address, prefix=ns.prefix))
            backends += [{"name": "lm_stock", "url": stock.url}, {"name": "redis", "url": redis.url}]
        if args.backends:   # a partial run (prints, writes nothing)
            wanted = set(args.backends.split(","))
            backends = [b for b in backends if b["name"] in wanted]
        pids = {"raw": raw[2], "native": worker.process.pid, "lm_curvine": worker.process.pid}
        if baselines:
            pids.update(lm_stock=_pid(stock), redis=_pid(redis))
        spec = {"geometry": geometry, "count": count, "repeats": repeats, "raw": list(raw[:2]), "backends": backends,
                "server_pids": pids}
        print(f"across a veth link: {len(backends)} backends x {count} chunks of {chunk_bytes(geometry) >> 20} MiB, "
              f"{repeats} repeats", file=sys.stderr, flush=True)
        return run_child(spec)


def part2(root: pathlib.Path, args: Any) -> dict[str, Any]:
    """32 MiB chunks from servers in another network namespace (a remote tier's setting)."""
    return remote(root, args, geometry=LLAMA_8B, count=args.count, repeats=args.repeats, baselines=True)


def part3(root: pathlib.Path, args: Any) -> dict[str, Any]:
    """The reference scenario: 7 chunks of 14 MiB from a worker in another namespace."""
    return remote(root, args, geometry=QWEN2_7B, count=SCENARIO_TOKENS // CHUNK_TOKENS,
                  repeats=args.scenario_repeats, baselines=False)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--child":
        return child_main(argv[1:])
    p = common.parser("lmcache", __doc__.splitlines()[0], repeats=7)
    p.add_argument("--count", type=int, default=8, help="32 MiB chunks per sample (default 8 = 256 MiB)")
    p.add_argument("--scenario-repeats", type=int, default=21, help="repeats of the reference scenario (default 21)")
    p.add_argument("--dir", default="/var/tmp", help="where data dirs and raw files live (default /var/tmp)")
    p.add_argument("--no-fs", action="store_true", help="skip fs:// over the FUSE mount")
    p.add_argument("--no-mp", action="store_true", help="skip `lmcache bench l2` (MP adapters)")
    p.add_argument("--backends", default="",
                   help="only these backends (comma list of " + ",".join(LABELS) + "); for profiling: "
                        "prints, writes nothing")
    p.add_argument("--streams-sweep", type=lambda v: [int(n) for n in v.split(",") if n], default=[],
                   help="across the link also run the native plugin with these batch_streams (comma list); "
                        "use with --part 2 or 3 (prints, writes nothing)")
    p.add_argument("--part", default="all",
                   help="all (default) or a comma list of 1 (loopback), 2 (veth), 3 (scenario): partial runs "
                        "print, write nothing")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.count, args.scenario_repeats = min(args.repeats, 3), min(args.count, 4), 5
    sys.path.insert(0, str(common.REPO))
    info = common.machine()
    root = pathlib.Path(tempfile.mkdtemp(prefix="curvine-bench-lmcache-", dir=args.dir))
    root.chmod(0o755)
    parts = {"1": part1, "2": part2, "3": part3}
    chosen = list(parts) if args.part == "all" else args.part.split(",")
    try:
        results = {name: parts[name](root, args) for name in chosen}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.part != "all" or args.backends:
        for name, r in results.items():
            for backend, samples in r["backends"].items():
                print(f"part {name} {backend}: (put s, get s) per repeat "
                      f"{[(round(x['put_s'], 3), round(x['get_s'], 3)) for x in samples]}", file=sys.stderr)
        print(json.dumps({name: summarize(r) for name, r in results.items()}, indent=1))
        return 0
    p1, p2, p3 = results["1"], results["2"], results["3"]
    scenario_ratio = common.median(s["get_s"] / r["get_s"]
                                   for s, r in zip(p3["backends"]["native"], p3["raw"], strict=True))
    ratios = {
        "native_vs_redis_get": ratio_between(p1, "native", "redis", "get"),
        "native_vs_stock_lm_get": ratio_between(p1, "native", "lm_stock", "get"),
        "native_vs_redis_put": ratio_between(p1, "native", "redis", "put"),
        "native_vs_stock_lm_put": ratio_between(p1, "native", "lm_stock", "put"),
        "native_local_vs_stock_lm_get": ratio_between(p1, "native_local", "lm_stock", "get"),
        "veth_native_vs_redis_get": ratio_between(p2, "native", "redis", "get"),
        "veth_native_vs_stock_lm_get": ratio_between(p2, "native", "lm_stock", "get"),
        "scenario_vs_raw_time": scenario_ratio,
    }
    verdicts = {name: {"target": target, "value": ratios[name],
                       "met": ratios[name] <= target if name == "scenario_vs_raw_time" else ratios[name] >= target}
                for name, target in TARGETS.items()}

    def part(result: dict[str, Any]) -> dict[str, Any]:
        return {"summary": summarize(result), "bytes_per_sample": result["bytes_per_sample"],
                "chunk_bytes": result["chunk_bytes"], "raw_samples": result["raw"], "samples": result["backends"]}

    payload = {
        "benchmark": "lmcache", "machine": info,
        "parameters": {"count": args.count, "repeats": args.repeats, "scenario_repeats": args.scenario_repeats,
                       "scenario_tokens": SCENARIO_TOKENS, "scenario_chunks": SCENARIO_TOKENS // CHUNK_TOKENS,
                       "dir": args.dir, "quick": args.quick},
        "loopback": {**part(p1), "mp_l2": p1["mp_l2"]},
        "veth": part(p2),
        "scenario": {**part(p3), "native_ms": common.median(s["get_s"] * 1e3 for s in p3["backends"]["native"]),
                     "raw_ms": common.median(r["get_s"] * 1e3 for r in p3["raw"]), "reference_ms": REFERENCE_MS},
        "ratios": ratios, "targets": verdicts,
    }
    try:
        body = render(payload)
    except Exception:
        keep = pathlib.Path(tempfile.gettempdir()) / "bench-lmcache-payload.json"
        keep.write_text(json.dumps(payload))
        print(f"render failed; the measured payload is in {keep}", file=sys.stderr)
        raise
    common.publish("lmcache", args, payload, body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
