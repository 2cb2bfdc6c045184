"""Per-request cost of a KV get and put (issue 14): what a request spends outside the copy.

    python -m bench.kv_profile [--count 400] [--sizes 4096,1048576] [--profile DIR]
    python -m bench.kv_profile --full-cache 64 [--count 600] [--sizes 1048576]

One master + one worker on loopback (the client on another node name: TCP), serial gets and puts
of each size; for each (size, op): wall us per request and CPU us per request in the client and
in the worker (schedstat), next to the Reno raw pair (bench/rawpair.py) doing the same requests.
KV minus raw at the same size is the fixed cost per request (the bytes are copied once by both);
gets are also measured against the verifying raw pair (`raw vget`: its receiver hashes each 1 MiB
as it lands, as our client verifies every chunk), whose difference leaves the hash out.
With --profile, the client runs under cProfile and the worker's connections too
(CURVINE_PROFILE_DIR, worker/server.py), both on the thread's CPU clock (a wait for the peer costs
nothing); the top entries by own CPU time are printed per op, with the calls per request.
With --full-cache MIB, the worker's data dir holds MIB MiB and is filled twice over first, so every
put of the sample makes room by eviction (the watermarks: above 90% it evicts down to 75%), as a
cache at capacity does: the wall of each put (median, p90, p99, max), the puts over 5 ms, and the
CPU per put of client and worker; no raw pair (the file system's work is the point).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pathlib
import pstats
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.kv import aligned
from bench.rawpair import RawClient, process_cpu, raw_server

TOP = 22


def measure(op: Callable[[int], None], count: int, server_pid: int) -> tuple[float, float, float]:
    """(wall, client CPU, server CPU) in microseconds per call."""
    client0, server0 = process_cpu(os.getpid()), process_cpu(server_pid)
    start = time.perf_counter()
    for index in range(count):
        op(index)
    wall = time.perf_counter() - start
    return (wall * 1e6 / count, (process_cpu(os.getpid()) - client0) * 1e6 / count,
            (process_cpu(server_pid) - server0) * 1e6 / count)


def top(stats: pstats.Stats, limit: int = TOP) -> str:
    out = io.StringIO()
    stats.stream = out
    stats.sort_stats("tottime").print_stats(limit)
    lines = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return "\n".join(line.replace(str(pathlib.Path.cwd()) + "/", "") for line in lines[start:] if line.strip())


def run_case(cluster: Any, raw: RawClient, raw_pid: int, worker_pid: int, size: int, op: str,
             data: memoryview, out: memoryview, args: argparse.Namespace, profile_dir: pathlib.Path | None,
             rows: dict[str, list[tuple[float, float, float]]]) -> None:
    """Interleaved samples of the raw pair and KV doing `op`; with a profile dir, the client's and
    the worker's profiles of the KV requests are printed."""
    client = cluster.client(node="c", membership_refresh_s=60.0)
    kv = client.kv
    kv.put(f"g{size}", data)
    assert kv.get_into(f"g{size}", out) == size
    serial = [0]

    def kv_put(i: int) -> None:
        kv.put(f"p{size}/{serial[0]}/{i}", data)

    def kv_get(_i: int) -> None:
        kv.get_into(f"g{size}", out)

    subject = kv_get if op == "get" else kv_put
    baseline = (lambda _i: raw.get(out)) if op == "get" else (lambda _i: raw.put(data))
    profiler = cProfile.Profile(time.thread_time_ns, 1e-9) if profile_dir else None   # CPU, not waits
    for _ in range(args.repeats):
        serial[0] += 1
        rows.setdefault(f"raw {op}", []).append(measure(baseline, args.count, raw_pid))
        if op == "get":
            rows.setdefault("raw vget", []).append(measure(lambda _i: raw.get(out, verify=True), args.count, raw_pid))
        if profiler:
            profiler.enable()
        rows.setdefault(f"kv {op}", []).append(measure(subject, args.count, worker_pid))
        if profiler:
            profiler.disable()
        if op == "put":
            for i in range(args.count):
                kv.delete(f"p{size}/{serial[0]}/{i}")
    client.close()
    if profiler and profile_dir:
        time.sleep(0.5)   # the worker's connections end and dump their stats
        workers = [str(f) for f in profile_dir.glob("worker-data-*.prof")]
        requests = args.repeats * args.count
        client_stats = pstats.Stats(profiler)
        print(f"\n=== client, {op} of {size} bytes ({requests} requests, "
              f"{client_stats.total_calls / requests:.0f} calls each)")   # type: ignore[attr-defined]
        print(top(client_stats))
        if workers:
            worker_stats = pstats.Stats(*workers)
            print(f"\n=== worker, {op} of {size} bytes (its data connections; deletes included; "
                  f"{worker_stats.total_calls / requests:.0f} calls per {op})")   # type: ignore[attr-defined]
            print(top(worker_stats))
            for f in workers:
                os.unlink(f)


def report(size: int, args: argparse.Namespace, rows: dict[str, list[tuple[float, float, float]]]) -> None:
    print(f"\n{size} bytes: us per request, median of {args.repeats} x {args.count}"
          " (wall, client CPU, server CPU)")
    for name, samples in rows.items():
        wall, ccpu, scpu = (statistics.median(s[i] for s in samples) for i in range(3))
        print(f"  {name:8s} {wall:8.1f} {ccpu:8.1f} {scpu:8.1f}")
    for op in ("get", "put"):
        kvr, rawr = rows[f"kv {op}"], rows[f"raw {op}"]
        fixed = [statistics.median(a[i] - b[i] for a, b in zip(kvr, rawr, strict=True)) for i in range(3)]
        print(f"  {op} KV - raw: wall {fixed[0]:.1f}, client CPU {fixed[1]:.1f}, worker CPU {fixed[2]:.1f}")
    kvr, rawr = rows["kv get"], rows["raw vget"]
    fixed = [statistics.median(a[i] - b[i] for a, b in zip(kvr, rawr, strict=True)) for i in range(3)]
    print(f"  get KV - verifying raw: wall {fixed[0]:.1f}, client CPU {fixed[1]:.1f}, worker CPU {fixed[2]:.1f}")


def full_cache(root: pathlib.Path, capacity_mib: int, sizes: list[int], args: argparse.Namespace) -> None:
    """Serial puts of new keys into a full cache (see the module docstring)."""
    from tests.harness import Cluster

    with Cluster(root / "cluster", workers=1, node_names=["w"], capacity=f"{capacity_mib}MiB",
                 worker_args=["--max-payload", str(64 << 20)]) as cluster:
        cluster.wait_for_live_workers(1)
        worker = cluster.workers[0]
        assert worker is not None
        client = cluster.client(node="c", membership_refresh_s=60.0)
        for size in sizes:
            data = aligned(size, fill=True)
            for i in range(2 * (capacity_mib << 20) // size):
                client.kv.put(f"fill/{size}/{i}", data)
            for r in range(args.repeats):
                walls: list[float] = []
                prefix = f"p/{size}/{r}"

                def put(i: int, prefix: str = prefix, data: memoryview = data, walls: list[float] = walls) -> None:
                    start = time.perf_counter()
                    client.kv.put(f"{prefix}/{i}", data)
                    walls.append((time.perf_counter() - start) * 1e3)
                wall, ccpu, wcpu = measure(put, args.count, worker.process.pid)
                walls.sort()
                n = len(walls)
                print(f"{size} bytes into a full {capacity_mib} MiB cache, {n} puts: wall per put {wall / 1e3:.2f} ms "
                      f"(median {walls[n // 2]:.2f}, p90 {walls[9 * n // 10]:.2f}, p99 {walls[99 * n // 100]:.2f}, "
                      f"max {walls[-1]:.1f}; {sum(w > 5 for w in walls)} over 5 ms); CPU per put: client "
                      f"{ccpu:.0f} us, worker {wcpu:.0f} us", flush=True)
        client.close()


def main() -> int:
    from tests.harness import Cluster

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=400, help="requests per sample")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--sizes", default="4096,1048576")
    p.add_argument("--profile", default="", help="directory for cProfile output (client and worker)")
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--full-cache", type=int, default=0, metavar="MIB",
                   help="puts into a full cache of this many MiB instead (see the docstring)")
    args = p.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    root = pathlib.Path(tempfile.mkdtemp(prefix="curvine-kvprof-", dir=args.dir))
    if args.full_cache:
        try:
            full_cache(root, args.full_cache, sizes, args)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return 0
    profile_dir = pathlib.Path(args.profile) if args.profile else None
    if profile_dir is not None:
        shutil.rmtree(profile_dir, ignore_errors=True)
        profile_dir.mkdir(parents=True)
        os.environ["CURVINE_PROFILE_DIR"] = str(profile_dir)
    try:
        with raw_server("127.0.0.1", root / "raw", congestion="reno") as (host, port, raw_pid), \
                Cluster(root / "cluster", workers=1, node_names=["w"],
                        worker_args=["--max-payload", str(64 << 20)]) as cluster:
            os.environ.pop("CURVINE_PROFILE_DIR", None)
            cluster.wait_for_live_workers(1)
            worker = cluster.workers[0]
            assert worker is not None
            worker_pid = worker.process.pid
            raw = RawClient(host, port, congestion="reno")
            for size in sizes:
                data, out = aligned(size, fill=True), aligned(size)
                raw.get(out)
                rows: dict[str, list[tuple[float, float, float]]] = {}
                for op in ("get", "put"):
                    run_case(cluster, raw, raw_pid, worker_pid, size, op, data, out, args, profile_dir, rows)
                report(size, args, rows)
            raw.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
