"""Soak: N concurrent clients of mixed KV and file operations against a real cluster (1 master + 3
workers, tests/harness.py) for a duration; every byte read is verified, every error counted, the
RSS of every daemon sampled.

    .venv/bin/curvine-py bench soak                     # 64 clients, 600 s: bench/results/soak.json
    .venv/bin/curvine-py bench soak --clients 16 --duration 60 --quick

Each client is a thread with its own `CurvineClient` (its own gRPC channel and data connections);
the threads run in `--procs` driver processes (2 by default: the machine has 2 cores, and one
process of 64 threads would measure its own GIL). A client draws its next operation at random:

- KV `put` of a new key (4 KiB .. 1 MiB, cache class: the workers evict under the load), `get` and
  `exists` of one of its recent keys. A key names its size and its bytes are derived from the key,
  so every get is checked byte for byte; a get or exists that misses (evicted) is a miss, not an
  error: only wrong bytes are a mismatch.
- files in a `durable` directory with 2 replicas and 1 MiB blocks: `create` (write + close, up to
  1.2 MiB, so several blocks), `read` (whole file, verified), `rename`, `unlink`. A durable file may
  not go missing: any failure on it is an error.
After the duration each client verifies what it still holds (every live file, every recent key).

RSS: the master's and every worker's resident set is sampled every `--rss-interval` seconds with
psutil. Its level after warm-up is the largest sample of the second half of the warm-up (the
steady state, its buffer peaks included); the run passes when no later sample exceeds it by more
than `--rss-bound` (10%). Latencies go into log-spaced buckets 2% apart (p50/p99 to 2%).

Output: JSON (`--out`, default bench/results/soak.json, soak.quick.json with --quick), a PNG of
ops/s and RSS over time beside it, and a markdown table on stdout for docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import hashlib
import json
import math
import multiprocessing
import os
import pathlib
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from typing import Any

import psutil

from bench import common

KiB, MiB = 1 << 10, 1 << 20
KV_SIZES = (4 * KiB, 64 * KiB, 256 * KiB, MiB)
FILE_SIZES = (4 * KiB, 200 * KiB, MiB + 200 * KiB)
FILE_BLOCK = MiB
FILES_PER_CLIENT = 4
KEYS_PER_CLIENT = 32
# Operation mix (relative weights): reads dominate, as in a KV cache.
WEIGHTS = {"kv_put": 20, "kv_get": 30, "kv_exists": 15, "file_create": 10, "file_read": 15,
           "file_rename": 5, "file_unlink": 5}
OPS = (*WEIGHTS, "verify_file", "verify_key")
BUCKET_RATIO = 1.02               # latency histogram resolution
WINDOW_S = 5.0                    # ops/s time series granularity
STARTUP_S = 8.0                   # drivers spawn, import and connect before the common start
POOL = random.Random(20261201).randbytes(2 * MiB)
SOAK_DIR = "/soak"
# The master's production timers, not the harness's FAST_TIMERS (a 2 s worker lease is for tests
# that wait for expiry; on a loaded 2-core machine it expires live workers under a soak).
MASTER_TIMERS = ["--lease-ms", "5000", "--heartbeat-ms", "1000", "--unlink-grace-ms", "60000",
                 "--session-timeout-ms", "30000"]
MAX_ERRORS_KEPT = 50


@dataclasses.dataclass(frozen=True, slots=True)
class SoakParams:
    clients: int = 64
    duration_s: float = 600.0
    warmup_s: float = 0.0          # 0: a quarter of the duration, at most 150 s
    procs: int = 2
    rss_interval_s: float = 2.0
    rss_bound: float = 0.10
    # Room for the durable files' blocks still held for the 60 s unlink grace (about 0.9 GB per worker
    # at the full run's unlink rate) plus a cache that fills, and starts evicting, during the warm-up.
    worker_capacity: str = "2GiB"
    seed: int = 0

    @property
    def warmup(self) -> float:
        return self.warmup_s or min(150.0, self.duration_s / 4)


def expected(content_id: str, size: int) -> bytes:
    """The bytes of an object or file: a digest of its id, then pool bytes at an id-chosen offset
    (a key read in place of another does not match)."""
    head = hashlib.blake2b(content_id.encode(), digest_size=16).digest()
    offset = int.from_bytes(head[:4], "little") % (len(POOL) - size)
    return (head + POOL[offset:offset + size])[:size]


# -- latency histogram ----------------------------------------------------------------------------

def bucket(seconds: float) -> int:
    return max(0, int(math.log(max(seconds, 1e-6) * 1e6) / math.log(BUCKET_RATIO)))


def percentile(histogram: dict[int, int], fraction: float) -> float:
    """Seconds at `fraction` of the samples (the bucket's geometric middle)."""
    total = sum(histogram.values())
    if not total:
        return 0.0
    seen = 0
    for index in sorted(histogram):
        seen += histogram[index]
        if seen >= fraction * total:
            return float(BUCKET_RATIO ** (index + 0.5) / 1e6)
    return 0.0


# -- one client ------------------------------------------------------------------------------------

class Tally:
    """What the clients of one driver process saw (merged under a lock)."""

    def __init__(self, start_at: float) -> None:
        self.start_at = start_at
        self.lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()
        self.misses: collections.Counter[str] = collections.Counter()
        self.histograms: dict[str, collections.Counter[int]] = {op: collections.Counter() for op in OPS}
        self.windows: collections.Counter[int] = collections.Counter()
        self.errors: collections.Counter[str] = collections.Counter()
        self.error_samples: list[str] = []
        self.mismatches: list[str] = []
        self.bytes_read = 0
        self.bytes_written = 0

    def moved(self, read: int = 0, written: int = 0) -> None:
        with self.lock:
            self.bytes_read += read
            self.bytes_written += written

    def done(self, op: str, seconds: float, finished: float) -> None:
        with self.lock:
            self.counts[op] += 1
            self.histograms[op][bucket(seconds)] += 1
            self.windows[int((finished - self.start_at) / WINDOW_S)] += 1

    def error(self, op: str, exc: BaseException) -> None:
        with self.lock:
            self.errors[f"{op}: {type(exc).__name__}"] += 1
            if len(self.error_samples) < MAX_ERRORS_KEPT:
                self.error_samples.append(f"{op}: {type(exc).__name__}: {exc}")

    def mismatch(self, what: str) -> None:
        with self.lock:
            self.mismatches.append(what)

    def result(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "misses": dict(self.misses),
                "histograms": {op: dict(h) for op, h in self.histograms.items()},
                "windows": dict(self.windows), "errors": dict(self.errors), "error_samples": self.error_samples,
                "mismatches": self.mismatches, "bytes_read": self.bytes_read, "bytes_written": self.bytes_written}


class SoakClient:
    """One client's loop: its own CurvineClient, its own keys and files."""

    def __init__(self, index: int, master: str, token: str, tally: Tally, seed: int) -> None:
        from curvine_py.client import CurvineClient

        self.index = index
        self.tally = tally
        self.rng = random.Random(seed * 100003 + index)
        self.client = CurvineClient(master, token=token, node=f"soak-{index}", membership_refresh_s=2.0)
        self.dir = f"{SOAK_DIR}/c{index}"
        self.client.fs.mkdir(self.dir)
        self.keys: collections.deque[tuple[str, int]] = collections.deque(maxlen=KEYS_PER_CLIENT)
        self.files: dict[str, tuple[str, int]] = {}     # path -> (content id, size)
        self.serial = 0

    def _next_name(self) -> str:
        self.serial += 1
        return f"{self.index}-{self.serial}"

    def run(self, end_at: float) -> None:
        ops, weights = list(WEIGHTS), list(WEIGHTS.values())
        while time.time() < end_at:
            self.step(self.rng.choices(ops, weights)[0])
        self.verify_all()

    def step(self, op: str) -> None:
        if op.startswith("file_") and op != "file_create" and not self.files:
            op = "file_create"
        if op in ("kv_get", "kv_exists") and not self.keys:
            op = "kv_put"
        if op == "file_create" and len(self.files) >= FILES_PER_CLIENT:
            op = "file_unlink"
        started = time.perf_counter()
        try:
            getattr(self, op)()
        except Exception as exc:   # noqa: BLE001 - every failure is counted: the soak expects none
            self.tally.error(op, exc)
            return
        finished = time.perf_counter()
        self.tally.done(op, finished - started, time.time())

    # -- KV ----------------------------------------------------------------------------------------
    def kv_put(self) -> None:
        size = self.rng.choice(KV_SIZES)
        key = f"soak/{self._next_name()}/{size}"
        data = expected(key, size)
        self.client.kv.put(key, data)
        self.keys.append((key, size))
        self.tally.moved(written=size)

    def _check_key(self, op: str, key: str, size: int) -> None:
        data = self.client.kv.get(key)
        if data is None:
            with self.tally.lock:
                self.tally.misses[op] += 1
            return
        self.tally.moved(read=len(data))
        if data != expected(key, size):
            self.tally.mismatch(f"{op} {key}: {len(data)} bytes, not the {size} put")

    def kv_get(self) -> None:
        key, size = self.rng.choice(self.keys)
        self._check_key("kv_get", key, size)

    def kv_exists(self) -> None:
        key, _size = self.rng.choice(self.keys)
        if not self.client.kv.exists(key):
            with self.tally.lock:
                self.tally.misses["kv_exists"] += 1

    # -- files -------------------------------------------------------------------------------------
    def file_create(self) -> None:
        size = self.rng.choice(FILE_SIZES)
        name = self._next_name()
        path = f"{self.dir}/f{name}"
        with self.client.fs.open(path, "xb") as f:
            f.write(expected(name, size))
        self.files[path] = (name, size)
        self.tally.moved(written=size)

    def _check_file(self, op: str, path: str) -> None:
        content_id, size = self.files[path]
        with self.client.fs.open(path) as f:
            data = f.read()
        self.tally.moved(read=len(data))
        if data != expected(content_id, size):
            self.tally.mismatch(f"{op} {path}: {len(data)} bytes, not the {size} written")

    def file_read(self) -> None:
        self._check_file("file_read", self.rng.choice(list(self.files)))

    def file_rename(self) -> None:
        old = self.rng.choice(list(self.files))
        new = f"{self.dir}/r{self._next_name()}"
        self.client.fs.rename(old, new)
        self.files[new] = self.files.pop(old)

    def file_unlink(self) -> None:
        path = self.rng.choice(list(self.files))
        self.client.fs.rm(path)
        del self.files[path]

    def verify_all(self) -> None:
        for path in list(self.files):
            self._timed("verify_file", lambda p=path: self._check_file("verify_file", p))
        for key, size in list(self.keys):
            self._timed("verify_key", lambda k=key, s=size: self._check_key("verify_key", k, s))

    def _timed(self, op: str, action: Any) -> None:
        started = time.perf_counter()
        try:
            action()
        except Exception as exc:   # noqa: BLE001 - counted as above
            self.tally.error(op, exc)
            return
        self.tally.done(op, time.perf_counter() - started, time.time())

    def close(self) -> None:
        self.client.close()


def drive(master: str, token: str, indexes: list[int], start_at: float, end_at: float, seed: int) -> dict[str, Any]:
    """A driver process: one thread per client index, all starting at `start_at`."""
    tally = Tally(start_at)
    clients: list[SoakClient] = []
    for index in indexes:
        try:
            clients.append(SoakClient(index, master, token, tally, seed))
        except Exception as exc:   # noqa: BLE001 - a client that cannot start is an error of the run
            tally.error("setup", exc)
    time.sleep(max(0.0, start_at - time.time()))
    threads = [threading.Thread(target=c.run, args=(end_at,), name=f"soak-{c.index}") for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for client in clients:
        client.close()
    return tally.result()


# -- the daemons' memory ---------------------------------------------------------------------------

def sample_rss(pids: dict[str, int], start_at: float, end_at: float, interval_s: float,
               samples: list[dict[str, float]], stop: threading.Event) -> None:
    procs = {name: psutil.Process(pid) for name, pid in pids.items()}
    while not stop.is_set() and time.time() < end_at:
        row: dict[str, float] = {"t": round(time.time() - start_at, 2), "load1": os.getloadavg()[0]}
        for name, proc in procs.items():
            try:
                row[name] = float(proc.memory_info().rss)
            except psutil.Error:
                row[name] = float("nan")
        samples.append(row)
        stop.wait(interval_s)


def rss_summary(samples: list[dict[str, float]], names: Iterable[str], warmup_s: float,
                bound: float) -> dict[str, dict[str, float | bool]]:
    out: dict[str, dict[str, float | bool]] = {}
    for name in names:
        level_window = [s[name] for s in samples if warmup_s / 2 <= s["t"] <= warmup_s]
        after = [s[name] for s in samples if s["t"] > warmup_s]
        if not level_window or not after:
            out[name] = {"ok": False, "level_mib": 0.0, "max_after_mib": 0.0, "growth": float("nan")}
            continue
        level, peak = max(level_window), max(after)
        growth = peak / level - 1
        out[name] = {"level_mib": round(level / MiB, 1), "max_after_mib": round(peak / MiB, 1),
                     "last_mib": round(after[-1] / MiB, 1), "growth": round(growth, 4),
                     "ok": bool(growth <= bound and not math.isnan(growth))}
    return out


# -- a run -------------------------------------------------------------------------------------------

def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    counts: collections.Counter[str] = collections.Counter()
    misses: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    windows: collections.Counter[int] = collections.Counter()
    histograms: dict[str, collections.Counter[int]] = {op: collections.Counter() for op in OPS}
    samples: list[str] = []
    mismatches: list[str] = []
    read = written = 0
    for part in parts:
        counts.update(part["counts"])
        misses.update(part["misses"])
        errors.update(part["errors"])
        windows.update({int(k): v for k, v in part["windows"].items()})
        for op, hist in part["histograms"].items():
            histograms[op].update({int(k): v for k, v in hist.items()})
        samples += part["error_samples"]
        mismatches += part["mismatches"]
        read += part["bytes_read"]
        written += part["bytes_written"]
    return {"counts": counts, "misses": misses, "errors": errors, "windows": windows,
            "histograms": histograms, "error_samples": samples[:MAX_ERRORS_KEPT], "mismatches": mismatches,
            "bytes_read": read, "bytes_written": written}


def run(params: SoakParams, root: pathlib.Path, *, token: str = "") -> dict[str, Any]:
    """Starts the cluster under `root`, soaks it, stops it; returns the result (see module doc)."""
    from curvine_py.core.domain import Policy, StorageClass
    from tests.harness import Cluster

    names = ["master", "worker0", "worker1", "worker2"]
    with Cluster(root, workers=3, token=token, capacity=params.worker_capacity, master_args=MASTER_TIMERS) as cluster:
        cluster.wait_for_live_workers(3)
        admin = cluster.client()
        admin.fs.mkdir(SOAK_DIR)
        admin.fs.set_policy(SOAK_DIR, Policy(storage_class=StorageClass.DURABLE, replicas=2, block_size=FILE_BLOCK))
        pids = {"master": cluster.master.process.pid}           # type: ignore[union-attr]
        pids.update({f"worker{i}": w.process.pid for i, w in enumerate(cluster.workers) if w})
        start_at = time.time() + STARTUP_S + params.clients * 0.05
        end_at = start_at + params.duration_s
        procs = max(1, min(params.procs, params.clients))
        shares = [list(range(params.clients))[p::procs] for p in range(procs)]
        rss: list[dict[str, float]] = []
        stop = threading.Event()
        sampler = threading.Thread(target=sample_rss, args=(pids, start_at, end_at, params.rss_interval_s, rss, stop),
                                   daemon=True)
        sampler.start()
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(procs, mp_context=context) as pool:
            futures = [pool.submit(drive, cluster.master_address, token, share, start_at, end_at, params.seed)
                       for share in shares]
            parts = [f.result() for f in futures]
        stop.set()
        sampler.join()
        alive = {name: bool(p and p.alive()) for name, p in zip(names, [cluster.master, *cluster.workers])}
    merged = merge(parts)
    seconds = params.duration_s
    loop_ops = [op for op in WEIGHTS]
    per_op = {op: {"count": merged["counts"][op], "ops_per_s": round(merged["counts"][op] / seconds, 1),
                   "p50_ms": round(percentile(merged["histograms"][op], 0.50) * 1e3, 2),
                   "p99_ms": round(percentile(merged["histograms"][op], 0.99) * 1e3, 2),
                   "misses": merged["misses"][op]} for op in OPS}
    memory = rss_summary(rss, names, params.warmup, params.rss_bound)
    total = sum(merged["counts"][op] for op in loop_ops)
    return {
        "params": dataclasses.asdict(params) | {"warmup_s": params.warmup, "kv_sizes": KV_SIZES,
                                               "file_sizes": FILE_SIZES, "weights": WEIGHTS},
        "ops_per_s": round(total / seconds, 1),
        "ops": per_op,
        "errors": sum(merged["errors"].values()),
        "errors_by_op": dict(merged["errors"]),
        "error_samples": merged["error_samples"],
        "mismatches": len(merged["mismatches"]),
        "mismatch_samples": merged["mismatches"][:MAX_ERRORS_KEPT],
        "bytes_read": merged["bytes_read"],
        "bytes_written": merged["bytes_written"],
        "daemons_alive_at_end": alive,
        "rss": memory,
        "rss_ok": all(bool(m["ok"]) for m in memory.values()),
        "rss_samples": rss,
        "ops_per_window": {str(k * WINDOW_S): round(v / WINDOW_S, 1) for k, v in sorted(merged["windows"].items())},
    }


def doc_table(result: dict[str, Any]) -> str:
    p = result["params"]
    rows = [(op, v["count"], v["ops_per_s"], v["p50_ms"], v["p99_ms"], v["misses"])
            for op, v in result["ops"].items() if v["count"]]
    ops = common.table(["op", "count", "ops/s", "p50 ms", "p99 ms", "misses"], rows)
    mem = common.table(["daemon", "RSS after warm-up MiB", "max later MiB", "growth"],
                       [(n, m["level_mib"], m["max_after_mib"], f"{float(m['growth']):+.1%}")
                        for n, m in result["rss"].items()])
    return (f"{p['clients']} clients ({p['procs']} processes), {p['duration_s']:.0f} s, 1 master + 3 workers: "
            f"{result['ops_per_s']} ops/s, {result['errors']} errors, {result['mismatches']} mismatches, "
            f"RSS within +{p['rss_bound']:.0%}: {'yes' if result['rss_ok'] else 'NO'}.\n\n{ops}\n\n{mem}")


def plot(result: dict[str, Any], path: pathlib.Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.2), dpi=110, layout="constrained")
    ops_ax, rss_ax = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    windows = result["ops_per_window"]
    ops_ax.plot([float(t) for t in windows], list(windows.values()), marker=".")
    ops_ax.set(title="ops/s (all clients)", xlabel="s", ylabel="ops/s")
    for name in result["rss"]:
        rows = [s for s in result["rss_samples"] if name in s]
        rss_ax.plot([s["t"] for s in rows], [s[name] / MiB for s in rows], label=name)
    rss_ax.axvline(result["params"]["warmup_s"], color="grey", linestyle="--", label="end of warm-up")
    rss_ax.set(title="daemon RSS", xlabel="s", ylabel="MiB")
    load_ax = ops_ax.twinx()
    load_ax.plot([s["t"] for s in result["rss_samples"]], [s["load1"] for s in result["rss_samples"]],
                 color="tab:red", alpha=0.5, label="load average (1 min)")
    load_ax.set_ylabel("load average")
    load_ax.legend(loc="upper right")
    rss_ax.legend()
    for ax in (ops_ax, rss_ax):
        ax.grid(True, alpha=0.3)
    fig.savefig(path, metadata={"Software": None})


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="curvine-py bench soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = SoakParams()
    p.add_argument("--clients", type=int, default=defaults.clients)
    p.add_argument("--duration", type=float, default=defaults.duration_s, help="seconds of load")
    p.add_argument("--warmup", type=float, default=0.0, help="seconds before the RSS level is taken")
    p.add_argument("--procs", type=int, default=defaults.procs, help="driver processes the clients run in")
    p.add_argument("--rss-interval", type=float, default=defaults.rss_interval_s)
    p.add_argument("--rss-bound", type=float, default=defaults.rss_bound)
    p.add_argument("--capacity", default=defaults.worker_capacity, help="each worker's data-dir capacity")
    p.add_argument("--dir", default="/var/tmp", help="where the cluster's data dirs live (a real disk)")
    p.add_argument("--out", help="JSON path (default bench/results/soak.json, soak.quick.json with --quick)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    params = SoakParams(clients=args.clients, duration_s=args.duration, warmup_s=args.warmup, procs=args.procs,
                        rss_interval_s=args.rss_interval, rss_bound=args.rss_bound, worker_capacity=args.capacity)
    root = pathlib.Path(tempfile.mkdtemp(prefix="curvine-soak-", dir=args.dir))
    try:
        started = common.machine()
        result = {"machine": started, **run(params, root)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(doc_table(result))
    if result["error_samples"]:
        print("errors:\n  " + "\n  ".join(result["error_samples"]), file=sys.stderr)
    if not args.no_write:
        out = pathlib.Path(args.out) if args.out else common.RESULTS / ("soak.quick.json" if args.quick else "soak.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        png = out.with_suffix(".png")
        plot(result, png)
        print(f"wrote {out} and {png}", file=sys.stderr)
    clean = not result["errors"] and not result["mismatches"] and result["rss_ok"]
    return 0 if clean and all(result["daemons_alive_at_end"].values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
