"""The cost of an open through the mount and of the master calls behind it, checkout against checkout
(issue 14: every open of a file through the mount validates its page cache with GetBlocks).

    python bench/open_cost.py NAME=CHECKOUT NAME=CHECKOUT [--engines sqlite,postgresql] [--repeats 5]
                              [--calls 300] [--opens 300] [--json PATH]

Per checkout and engine, one worker process (PYTHONPATH and cwd its checkout, so the master, the
worker, the mount and the client are all that checkout's code) starts a cluster (tests/harness.py:
a master and one worker; on PostgreSQL 15 from tests/pgserver.py, one database per checkout), a
mount, writes one 32 MiB file through the client library and reads it once through the mount (the
kernel's page cache then holds it). Asked in turns (the checkouts' order alternating by repeat, so
both see the same load), each answers one sample of:

    GetBlocks, Lookup, GetAttr   `--calls` calls from one client thread: the median latency (us) and
                                 the master process's CPU per call (us, from /proc)
    open+close                   `--opens` open(O_RDONLY)+close of the cached file through the mount:
                                 median latency, master and mount CPU per open
    handler GetBlocks/Lookup     in that process, the master's own work per call without gRPC: the
                                 servicer method called directly on a store of its own (SQLite or a
                                 PostgreSQL database of its own), with its parts beside it: the store
                                 thread's hand-off of a no-op, the file's block map read on a reader,
                                 the reply's conversion

Reported: per row the median over repeats of each checkout's value and of the per-repeat ratio of
each checkout to the first, with the 1-minute load average at the start and after every repeat.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

MiB = 1 << 20
ROWS = ("GetBlocks", "Lookup", "GetAttr", "open+close", "split")
FILE = "c0"


# -- the worker: one checkout's cluster and mount ----------------------------------------------------
def cpu_ns(pid: int) -> int:
    """utime + stime of a process, in ns (clock ticks from /proc)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def sample(fn: Callable[[], object], n: int, pids: dict[str, int]) -> dict[str, float]:
    """n calls of fn (after n // 5 not counted: every handler thread opens its reader at its first
    read): the median latency and each process's CPU per call, in us."""
    for _ in range(n // 5):
        fn()
    before = {name: cpu_ns(pid) for name, pid in pids.items()}
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    out = {"us": statistics.median(times) / 1000}
    out.update({f"{name} cpu us": (cpu_ns(pid) - before[name]) / n / 1000 for name, pid in pids.items()})
    return out


def split(root: pathlib.Path, url: str, n: int, turn: int) -> dict[str, float]:
    """The master's work for one GetBlocks and one Lookup without gRPC, and its parts (median us),
    on the store of `root` / `url` (a new file each `turn`)."""
    from curvine_py.master.engine.open import open_namespace
    from curvine_py.master.engine.url import parse_meta_url
    from curvine_py.master.membership import Membership
    from curvine_py.master.namespace import Namespace
    from curvine_py.master.service import MasterService
    from curvine_py.master.storethread import StoreThread
    from curvine_py.master.types import ROOT_INO, BlockInfo, FileType, WorkerInfo
    from curvine_py.proto.curvine.v1 import master_pb2 as mpb
    from curvine_py.rpc import convert

    ns = (open_namespace(parse_meta_url(url), block_size=64 * MiB) if url
          else Namespace(str(root / "split.db"), block_size=64 * MiB))
    mem = Membership(ns)
    mem.register(WorkerInfo("w1", "127.0.0.1", 1, node="n"), [])
    name = f"split{turn}"
    attr = ns.create(ROOT_INO, name, FileType.REGULAR, 0o644)
    grant = ns.add_block(attr.ino, 0, "", mem.live_workers())
    ns.commit_file(attr.ino, 32 * MiB, [BlockInfo(0, grant.block_id, 32 * MiB, 7, grant.worker_ids)])
    store = StoreThread(ns)
    store.start()
    service = MasterService(ns, mem, store)
    reader = ns.reader()
    by_ino, by_name = mpb.InodeRequest(ino=attr.ino), mpb.LookupRequest(parent=ROOT_INO, name=name)
    fb = ns.get_blocks(attr.ino)

    def on_reader(fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            with reader.snapshot():
                return fn()
        return run

    parts: dict[str, Callable[[], object]] = {
        "handler GetBlocks": lambda: service.GetBlocks(by_ino, None),  # type: ignore[arg-type]
        "handler Lookup": lambda: service.Lookup(by_name, None),  # type: ignore[arg-type]
        "store thread hand-off (no-op)": lambda: store.call(lambda: None),
        "block map on a reader": on_reader(lambda: reader.get_blocks(attr.ino)),
        "lookup on a reader": on_reader(lambda: reader.lookup(ROOT_INO, name)),
        "blocks_reply conversion": lambda: convert.blocks_reply(fb),
    }
    try:
        return {name: sample(fn, n, {})["us"] for name, fn in parts.items()}
    finally:
        store.stop()
        service.close()
        reader.close()
        ns.close()


@contextlib.contextmanager
def cluster(root: pathlib.Path, url: str) -> Iterator[tuple[Any, Any, Any]]:
    """(cluster, mount, client) of this checkout, the file written and read once through the mount."""
    from tests.fuse.mounts import Mount
    from tests.harness import Cluster

    with contextlib.ExitStack() as stack:
        c = stack.enter_context(Cluster(root / "cl", workers=1, node_names=["w"],
                                        master_args=["--meta", url] if url else []))
        client = c.client(node="x")
        with client.fs.open(f"/{FILE}", "wb") as f:
            f.write(os.urandom(32 * MiB))
        mount = stack.enter_context(Mount(c.master_address, root / "mnt", args=["--node", "reader"]))
        (mount.path / FILE).read_bytes()
        yield c, mount, client


def serve(args: argparse.Namespace) -> int:
    root = pathlib.Path(tempfile.mkdtemp(prefix="curvine-open-cost-", dir=args.dir))
    try:
        with cluster(root, args.url) as (c, mount, client):
            ino = client.master.lookup(1, FILE).ino
            master_pid, mount_pid = c.master.process.pid, mount.process.process.pid
            path = str(mount.path / FILE)
            turns = iter(range(1 << 30))
            rows: dict[str, Callable[[], dict[str, float]]] = {
                "GetBlocks": lambda: sample(lambda: client.master.get_blocks(ino), args.calls, {"master": master_pid}),
                "Lookup": lambda: sample(lambda: client.master.lookup(1, FILE), args.calls, {"master": master_pid}),
                "GetAttr": lambda: sample(lambda: client.master.getattr(ino), args.calls, {"master": master_pid}),
                "open+close": lambda: sample(lambda: os.close(os.open(path, os.O_RDONLY)), args.opens,
                                             {"master": master_pid, "mount": mount_pid}),
                "split": lambda: split(root / "split", args.split_url, args.calls, next(turns)),
            }
            (root / "split").mkdir()
            print("ready", flush=True)
            for line in sys.stdin:
                print(json.dumps(rows[line.strip()]()), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


# -- the driver ----------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> dict[str, Any]:
    here = str(pathlib.Path(__file__).resolve())
    sides = [tuple(s.split("=", 1)) for s in args.sides]
    result: dict[str, Any] = {"sides": dict(sides), "repeats": args.repeats, "calls": args.calls,
                              "opens": args.opens, "loadavg": [], "engines": {}}
    with contextlib.ExitStack() as stack:
        pg = None
        if "postgresql" in args.engines:
            from tests.pgserver import PgServer
            pg = stack.enter_context(PgServer(pathlib.Path(tempfile.mkdtemp(prefix="curvine-open-cost-pg-")) / "pg"))
        workers: dict[tuple[str, str], subprocess.Popen[str]] = {}
        for engine in args.engines:
            for name, checkout in sides:
                url = split_url = ""
                if engine == "postgresql":
                    assert pg is not None
                    url, split_url = pg.url(f"m_{name}"), pg.url(f"s_{name}")
                argv = [sys.executable, here, "--serve", "--calls", str(args.calls), "--opens", str(args.opens),
                        "--url", url, "--split-url", split_url, "--dir", args.dir]
                w = subprocess.Popen(argv, cwd=checkout, env={**os.environ, "PYTHONPATH": checkout},
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                stack.callback(w.wait, 120)
                stack.callback(w.stdin.close)  # type: ignore[union-attr]
                workers[(engine, name)] = w
        for w in workers.values():
            assert w.stdout is not None and w.stdout.readline().strip() == "ready"
        samples: dict[str, dict[str, dict[str, list[dict[str, float]]]]] = {
            e: {n: {r: [] for r in ROWS} for n, _ in sides} for e in args.engines}
        result["loadavg"].append(os.getloadavg()[0])
        for r in range(args.repeats):
            for engine in args.engines:
                for row in ROWS:
                    for name, _ in (sides if r % 2 == 0 else sides[::-1]):
                        w = workers[(engine, name)]
                        assert w.stdin is not None and w.stdout is not None
                        w.stdin.write(row + "\n")
                        w.stdin.flush()
                        samples[engine][name][row].append(json.loads(w.stdout.readline()))
            result["loadavg"].append(os.getloadavg()[0])
            print(f"repeat {r + 1}/{args.repeats}: load {result['loadavg'][-1]:.2f}", flush=True)
    base = sides[0][0]
    for engine in args.engines:
        out: dict[str, Any] = {}
        for row in ROWS:
            keys = samples[engine][base][row][0].keys()
            for key in keys:
                label = f"{row} {key}" if row != "split" else key
                cell: dict[str, float] = {}
                for name, _ in sides:
                    values = [s[key] for s in samples[engine][name][row]]
                    cell[name] = statistics.median(values)
                    if name != base:
                        ratios = [v / b[key] for v, b in zip(values, samples[engine][base][row], strict=True) if b[key]]
                        cell[f"{name}/{base}"] = statistics.median(ratios) if ratios else 0.0
                out[label] = cell
        result["engines"][engine] = out
    result["samples"] = samples
    return result


def render(result: dict[str, Any]) -> str:
    names = list(result["sides"])
    base = names[0]
    lines = []
    for engine, rows in result["engines"].items():
        lines += ["", (f"{engine}: medians over {result['repeats']} repeats ({result['calls']} calls / "
                       f"{result['opens']} opens each), us"), "",
                  "| row | " + " | ".join(names) + " | " + " | ".join(f"{n}/{base}" for n in names[1:]) + " |",
                  "|---|" + "---|" * (2 * len(names) - 1)]
        for label, cell in rows.items():
            lines.append(f"| {label} | " + " | ".join(f"{cell[n]:,.0f}" for n in names) + " | "
                         + " | ".join(f"{cell[f'{n}/{base}']:.2f}x" for n in names[1:]) + " |")
    lines.append("")
    lines.append("1-minute load average at the start and after each repeat: "
                 + ", ".join(f"{x:.2f}" for x in result["loadavg"]))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python bench/open_cost.py", description=__doc__.splitlines()[0])
    p.add_argument("sides", nargs="*", help="NAME=CHECKOUT, the first one the baseline")
    p.add_argument("--engines", default="sqlite,postgresql", help="sqlite, postgresql or both (default)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--calls", type=int, default=300, help="master calls per sample (default 300)")
    p.add_argument("--opens", type=int, default=300, help="opens per sample (default 300)")
    p.add_argument("--dir", default="/var/tmp", help="where the data dirs go (default /var/tmp)")
    p.add_argument("--json", default="", help="also write the result here")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", default="", help=argparse.SUPPRESS)
    p.add_argument("--split-url", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        return serve(args)
    if len(args.sides) < 2:
        p.error("give at least two NAME=CHECKOUT")
    args.engines = [e for e in args.engines.split(",") if e]
    result = run(args)
    print(render(result))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
