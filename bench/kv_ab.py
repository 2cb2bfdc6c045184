"""A/B of the per-request cost of KV gets and puts between this tree and another checkout, with
samples of the two interleaved finely enough to survive a shared machine's load (issue 14).

    python -m bench.kv_ab OTHER_CHECKOUT [--this CHECKOUT] [--sizes 4096,1048576] [--ops get,put]
                          [--count 200] [--rounds 15] [--json PATH]

Why not two runs of bench.kv_profile: on 2 cores shared with other jobs, the load moves by 2x
within a minute, so two runs a minute apart differ by more than the change being measured. Here
each side (this tree, the other checkout) is a child process with its own cluster (1 master +
1 worker on loopback, the client on another node name: TCP) and its own Reno raw pair
(bench/rawpair.py), started once; the parent then asks them for samples in turn: a round is, for
every (size, op), side A's raw pair and KV, then side B's (the order of the sides alternates from
round to round), each sample `--count` requests. Per sample: wall, client CPU and worker CPU per
request (schedstat). The fixed cost of a sample is KV minus the raw pair of the same side and
round; gets are also compared with the verifying raw pair (its receiver hashes each 1 MiB, as our
client does). Reported per side: medians over rounds; between the sides: the median of the
per-round ratios (this / other), which compares samples taken seconds apart.

The two sides are not symmetric on this machine: an A/A run (this tree on both sides, 15 rounds,
load 7) put the first side's KV CPU 5-16% above the second's. So run both orientations (`--this`
names the first side's checkout, default this tree) and read the two ratios together: a change
that is real moves both the same way (the geometric mean of A/B and 1/(B/A) cancels the side).

A child imports the checkout it measures (PYTHONPATH and working directory set to it: its
curvine_py and tests/harness.py) and this tree's bench/rawpair.py (the raw pair is the same on
both sides); it runs this file as a script, so the other checkout need not have it.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = pathlib.Path(__file__).resolve()


def _rawpair() -> Any:
    spec = importlib.util.spec_from_file_location("kv_ab_rawpair", HERE.parent / "rawpair.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve(sizes: list[int]) -> None:
    """The child: a cluster and a raw pair of the checkout on sys.path; answers sample requests
    (JSON lines on stdin: [what, size, count]) with [wall, client CPU, server CPU] per request, us."""
    import mmap

    from tests.harness import Cluster

    rawpair = _rawpair()
    root = pathlib.Path(tempfile.mkdtemp(prefix="curvine-kvab-", dir="/var/tmp"))
    try:
        with rawpair.raw_server("127.0.0.1", root / "raw", congestion="reno") as (host, port, raw_pid), \
                Cluster(root / "cluster", workers=1, node_names=["w"],
                        worker_args=["--max-payload", str(64 << 20)]) as cluster:
            cluster.wait_for_live_workers(1)
            worker = cluster.workers[0]
            assert worker is not None
            worker_pid = worker.process.pid
            raw = rawpair.RawClient(host, port, congestion="reno")
            client = cluster.client(node="c", membership_refresh_s=60.0)
            kv = client.kv
            buffers: dict[int, tuple[memoryview, memoryview]] = {}
            for size in sizes:
                data, out = memoryview(mmap.mmap(-1, size)), memoryview(mmap.mmap(-1, size))
                data[:] = os.urandom(size)
                buffers[size] = (data, out)
                kv.put(f"g{size}", data)
                assert kv.get_into(f"g{size}", out) == size
                raw.get(out)
            print(json.dumps("ready"), flush=True)
            for serial, line in enumerate(sys.stdin):
                what, size, count = json.loads(line)
                data, out = buffers[size]
                op, side = _ops(raw, kv, data, out, f"p{size}/{serial}")[what]
                pid = raw_pid if side is None else worker_pid
                client0, server0 = rawpair.process_cpu(os.getpid()), rawpair.process_cpu(pid)
                start = time.perf_counter()
                for index in range(count):
                    op(index)
                wall = time.perf_counter() - start
                sample = [wall * 1e6 / count, (rawpair.process_cpu(os.getpid()) - client0) * 1e6 / count,
                          (rawpair.process_cpu(pid) - server0) * 1e6 / count]
                if what == "kv put":   # keep the page cache and the data dir small (not timed)
                    for index in range(count):
                        kv.delete(f"p{size}/{serial}/{index}")
                print(json.dumps(sample), flush=True)
            raw.close()
            client.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _ops(raw: Any, kv: Any, data: memoryview, out: memoryview,
         prefix: str) -> dict[str, tuple[Callable[[int], object], None | str]]:
    """What a sample runs: name -> (one request, None for the raw server's CPU, else the worker's)."""
    key = f"g{len(out)}"
    return {
        "raw get": (lambda _i: raw.get(out), None),
        "raw vget": (lambda _i: raw.get(out, verify=True), None),
        "raw put": (lambda _i: raw.put(data), None),
        "kv get": (lambda _i: kv.get_into(key, out), "worker"),
        "kv put": (lambda i: kv.put(f"{prefix}/{i}", data), "worker"),
    }


class Side:
    def __init__(self, name: str, checkout: pathlib.Path, sizes: list[int]) -> None:
        self.name = name
        env = dict(os.environ, PYTHONPATH=str(checkout))
        self.proc = subprocess.Popen([sys.executable, str(HERE), "--serve", "--sizes", ",".join(map(str, sizes))],
                                     cwd=checkout, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self._read() != "ready":
            raise SystemExit(f"{name}: the child did not start")

    def _read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name}: the child ended")
        return json.loads(line)

    def sample(self, what: str, size: int, count: int) -> list[float]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps([what, size, count]) + "\n")
        self.proc.stdin.flush()
        return list(self._read())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


FIELDS = ("wall", "client CPU", "worker CPU")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("other", nargs="?", help="the checkout to compare with")
    p.add_argument("--this", default=str(HERE.parents[1]), help="the first side's checkout (default: this tree)")
    p.add_argument("--sizes", default="4096,1048576")
    p.add_argument("--ops", default="get,put")
    p.add_argument("--count", type=int, default=200, help="requests per sample")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--json", default="", help="write the samples and the summary here")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    if args.serve:
        serve(sizes)
        return 0
    if not args.other:
        p.error("the other checkout is required")
    ops = args.ops.split(",")
    this = pathlib.Path(args.this).resolve()
    sides = [Side("this", this, sizes), Side("other", pathlib.Path(args.other).resolve(), sizes)]
    loads: list[str] = []
    samples: dict[str, dict[str, list[list[float]]]] = {side.name: {} for side in sides}
    try:
        for r in range(args.rounds):
            loads.append(pathlib.Path("/proc/loadavg").read_text().split()[0])
            for size in sizes:
                for op in ops:
                    whats = ["raw get", "raw vget", "kv get"] if op == "get" else [f"raw {op}", f"kv {op}"]
                    for side in sides if r % 2 == 0 else sides[::-1]:
                        for what in whats:
                            samples[side.name].setdefault(f"{size} {what}", []).append(
                                side.sample(what, size, args.count))
            print(f"  round {r + 1}/{args.rounds} (load {loads[-1]})", flush=True)
    finally:
        for side in sides:
            side.close()
    summary = report(samples, sizes, ops)
    print(f"load average at the start of each round: {' '.join(loads)}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({
            "benchmark": "kv_ab", "this": str(this), "other": str(pathlib.Path(args.other).resolve()),
            "count_per_sample": args.count, "rounds": args.rounds, "load_per_round": loads,
            "samples": samples, "summary": summary}, indent=1) + "\n")
    return 0


def report(samples: dict[str, dict[str, list[list[float]]]], sizes: list[int],
           ops: list[str]) -> dict[str, Any]:
    """Prints and returns, per (size, op): each side's medians of KV, raw and KV - raw, and the
    median of the per-round ratios other / this."""
    summary: dict[str, Any] = {}
    for size in sizes:
        for op in ops:
            baselines = ["raw get", "raw vget"] if op == "get" else [f"raw {op}"]
            for baseline in baselines:
                cell: dict[str, Any] = {}
                fixed: dict[str, list[list[float]]] = {}
                for name, rows in samples.items():
                    kv, raw = rows[f"{size} kv {op}"], rows[f"{size} {baseline}"]
                    fixed[name] = [[a[i] - b[i] for i in range(3)] for a, b in zip(kv, raw, strict=True)]
                    cell[name] = {
                        "kv": [statistics.median(s[i] for s in kv) for i in range(3)],
                        "raw": [statistics.median(s[i] for s in raw) for i in range(3)],
                        "kv_minus_raw": [statistics.median(s[i] for s in fixed[name]) for i in range(3)],
                        "raw_over_kv_wall": statistics.median(b[0] / a[0] for a, b in zip(kv, raw, strict=True)),
                    }
                this_kv, other_kv = samples["this"][f"{size} kv {op}"], samples["other"][f"{size} kv {op}"]
                cell["kv_this_over_other"] = [statistics.median(a[i] / b[i] for a, b in zip(this_kv, other_kv, strict=True))
                                              for i in range(3)]
                key = f"{size} {op} vs {baseline}"
                summary[key] = cell
                print(f"\n{key}: us per request, medians over rounds ({', '.join(FIELDS)})")
                for name in samples:
                    c = cell[name]
                    print(f"  {name:5s} KV {_fmt(c['kv'])} | raw {_fmt(c['raw'])} | KV - raw {_fmt(c['kv_minus_raw'])}"
                          f" | raw/KV wall {c['raw_over_kv_wall']:.2f}x")
                print(f"  KV this / other, median of per-round ratios: {_fmt(cell['kv_this_over_other'], '.3f')}")
    return summary


def _fmt(values: list[float], spec: str = ".1f") -> str:
    return " / ".join(format(v, spec) for v in values)


if __name__ == "__main__":
    if "--serve" in sys.argv:   # the checkout measured (its curvine_py, tests/harness.py), not bench/
        sys.path[0] = os.getcwd()
    raise SystemExit(main())
