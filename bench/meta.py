"""`curvine-py bench meta`: master metadata ops/s over gRPC, and how the cost grows with the namespace.

For each size N (default 10,000 and 1,000,000 existing files) a fresh master data dir is populated
in-process through the master's own store API (`master.namespace.Namespace.create` inside one
`batch()` per 50k files: minutes instead of hours over gRPC), then the real master process is
started on it (tests/harness.py) and measured through `client.master.MasterClient`:

    create   Create (exclusive) of a new regular file        -> a durable write (WAL fsync)
    lookup   Lookup(parent, name) of a random existing file   -> what a FUSE lookup costs
    stat     ResolvePath("/pop/NAME") of a random existing file -> what `fs stat` costs
    rename   Rename of a file created in this repeat           -> a durable write
    delete   Unlink of that renamed file                       -> a durable write

All N files sit in one directory (`/pop`): the worst case for a directory, and the layout of
LMCache's fs:// cache dir. Each op runs at concurrency 1 and 8 (threads sharing one MasterClient,
as one client process would). The baseline, measured right before every op in the same repeat, is
the RPC floor: GetMembership at the same concurrency (no SQL, but the same gRPC handler path
through the master's store thread). Reported: ops/s (median of repeats) and op / floor.
"""

from __future__ import annotations

import pathlib
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench import common

POP_DIR = "pop"
POP_BATCH = 50_000
OPS = ("create", "lookup", "stat", "rename", "delete")


def file_name(index: int) -> str:
    return f"kv-chunk-{index:09d}"


# -- population (in-process, the master's own store API) ------------------------------------------
def populate(data_dir: pathlib.Path, files: int) -> dict[str, float]:
    from curvine_py.master.main import DB_FILE
    from curvine_py.master.namespace import Namespace
    from curvine_py.master.types import FileType

    data_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    ns = Namespace(str(data_dir / DB_FILE))
    try:
        parent = ns.mkdir(1, POP_DIR).ino
        for first in range(0, files, POP_BATCH):
            with ns.batch():
                for index in range(first, min(files, first + POP_BATCH)):
                    ns.create(parent, file_name(index), FileType.REGULAR, 0o644)
            if files >= 10 * POP_BATCH:
                print(
                    f"    populated {min(files, first + POP_BATCH):,}/{files:,} "
                    f"({time.perf_counter() - start:.0f} s)",
                    flush=True,
                )
        ns._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # start the master with an empty WAL
    finally:
        ns.close()
    seconds = time.perf_counter() - start
    db_bytes = sum(p.stat().st_size for p in data_dir.iterdir() if p.name.startswith(DB_FILE))
    return {"seconds": seconds, "files_per_s": files / seconds, "db_mib": db_bytes / 2**20}


def store_costs(data_dir: pathlib.Path, files: int, ops: int, repeats: int) -> dict[str, float]:
    """Microseconds per op of the master's store itself, in-process (no gRPC, no store thread): the
    SQL cost and how it grows with N. Each op kind runs inside one transaction, so no fsync is
    counted here (the gRPC numbers include it)."""
    from curvine_py.master.main import DB_FILE
    from curvine_py.master.namespace import Namespace
    from curvine_py.master.types import FileType

    ns = Namespace(str(data_dir / DB_FILE))
    rng = random.Random(files + 1)
    samples: dict[str, list[float]] = {op: [] for op in OPS}
    try:
        parent = ns.lookup(1, POP_DIR).ino
        for r in range(repeats):
            fresh = [f"store-{r}-{i:06d}" for i in range(ops)]
            existing = [file_name(rng.randrange(files)) for _ in range(ops)]
            work: dict[str, Callable[[], object]] = {
                "create": lambda fresh=fresh: [ns.create(parent, n, FileType.REGULAR, 0o644) for n in fresh],
                "lookup": lambda existing=existing: [ns.lookup(parent, n) for n in existing],
                "stat": lambda existing=existing: [ns.resolve_path(f"/{POP_DIR}/{n}") for n in existing],
                "rename": lambda fresh=fresh: [ns.rename(parent, n, parent, n + ".r") for n in fresh],
                "delete": lambda fresh=fresh: [ns.unlink(parent, n + ".r") for n in fresh],
            }
            for op in OPS:
                with ns.batch():
                    samples[op].append(common.timed(work[op]) / ops * 1e6)
        ns._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        ns.close()
    return {op: common.median(values) for op, values in samples.items()}


# -- measurement ---------------------------------------------------------------------------------
def run_concurrently(work: Sequence[Callable[[], object]], threads: int) -> float:
    """Runs the calls on `threads` threads (each takes a contiguous share); returns ops/s."""
    shares = [work[i::threads] for i in range(threads)]
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def worker(share: Sequence[Callable[[], object]]) -> None:
        barrier.wait()
        try:
            for call in share:
                call()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(share,)) for share in shares]
    for t in pool:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in pool:
        t.join()
    seconds = time.perf_counter() - start
    if errors:
        raise errors[0]
    return len(work) / seconds


class MetaRun:
    def __init__(self, master: Any, files: int, ops: int, seed: int) -> None:
        from curvine_py.proto.curvine.v1 import common_pb2 as cpb
        from curvine_py.proto.curvine.v1 import master_pb2 as pb

        self.master = master
        self.files = files
        self.ops = ops
        self.rng = random.Random(seed)
        self.parent = master.lookup(1, POP_DIR).ino
        self._pb, self._cpb = pb, cpb

    def floor(self, threads: int) -> float:
        return run_concurrently([self.master.membership] * self.ops, threads)

    def repeat(self, tag: str, threads: int) -> dict[str, tuple[float, float]]:
        """One repeat of every op: {op: (ops/s, floor ops/s measured just before it)}."""
        pb, cpb, m, parent = self._pb, self._cpb, self.master, self.parent
        fresh = [f"new-{tag}-{i:06d}" for i in range(self.ops)]
        existing = [file_name(self.rng.randrange(self.files)) for _ in range(self.ops)]

        def create(name: str) -> Callable[[], object]:
            return lambda: m.create(
                pb.CreateRequest(parent=parent, name=name, type=cpb.REGULAR, mode=0o644, exclusive=True)
            )

        work: dict[str, list[Callable[[], object]]] = {
            "create": [create(n) for n in fresh],
            "lookup": [lambda n=n: m.lookup(parent, n) for n in existing],
            "stat": [lambda n=n: m.resolve(f"/{POP_DIR}/{n}") for n in existing],
            "rename": [lambda n=n: m.rename(parent, n, parent, n + ".r") for n in fresh],
            "delete": [lambda n=n: m.unlink(parent, n + ".r") for n in fresh],
        }
        result = {}
        for op in OPS:
            floor = self.floor(threads)
            result[op] = (run_concurrently(work[op], threads), floor)
        return result


def measure_size(files: int, args: Any, root: pathlib.Path) -> dict[str, Any]:
    from curvine_py.client.master import MasterClient
    from tests.harness import Cluster

    print(f"  {files:,} files: populating", flush=True)
    data_root = root / f"n{files}"
    population = populate(data_root / "master", files)
    print(
        f"    populated in {population['seconds']:.1f} s ({population['files_per_s']:,.0f} files/s, "
        f"{population['db_mib']:.0f} MiB)",
        flush=True,
    )
    store = store_costs(data_root / "master", files, args.ops, args.repeats)
    print("    store in-process: " + ", ".join(f"{op} {us:.0f} us" for op, us in store.items()), flush=True)
    out: dict[str, Any] = {
        "files": files,
        "population": population,
        "store_us_per_op": store,
        "concurrency": {},
    }
    with Cluster(data_root, workers=0) as cluster:
        master = MasterClient(cluster.master_address, timeout_s=60.0)
        try:
            run = MetaRun(master, files, args.ops, seed=files)
            run.floor(1)  # warm the channel and the master
            for threads in args.threads:
                per_op: dict[str, list[tuple[float, float]]] = {op: [] for op in OPS}
                for r in range(args.repeats):
                    for op, pair in run.repeat(f"c{threads}r{r}", threads).items():
                        per_op[op].append(pair)
                summary = {}
                for op, pairs in per_op.items():
                    p = common.Paired(tuple(s for s, _ in pairs), tuple(b for _, b in pairs))
                    summary[op] = p.summary()
                out["concurrency"][str(threads)] = summary
                cells = ", ".join(
                    f"{op} {s['subject_median']:,.0f}/s ({s['ratio_median']:.2f}x floor)"
                    for op, s in summary.items()
                )
                print(
                    f"    threads {threads}: {cells}; floor {summary['create']['baseline_median']:,.0f}/s",
                    flush=True,
                )
        finally:
            master.close()
    return out


def main(argv: list[str]) -> int:
    p = common.parser("meta", __doc__.splitlines()[0])
    p.add_argument("--files", default="10000,1000000", help="namespace sizes (default 10000,1000000)")
    p.add_argument("--ops", type=int, default=1000, help="operations per op kind per repeat (default 1000)")
    p.add_argument("--threads", default="1,8", help="client concurrencies (default 1,8)")
    p.add_argument(
        "--dir",
        default="",
        help="where to build the data dirs (default: a temp dir on /var/tmp, "
        "a real disk: fsync cost matters)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.files = "1000,20000" if args.files == "10000,1000000" else args.files
        args.ops = min(args.ops, 200)
        args.repeats = min(args.repeats, 3)
    sizes = [int(x) for x in args.files.split(",") if x]
    args.threads = [int(x) for x in args.threads.split(",") if x]
    info = common.machine()
    print(
        f"meta: files {sizes}, {args.ops} ops per op kind, threads {args.threads}, {args.repeats} repeats",
        flush=True,
    )
    root = pathlib.Path(tempfile.mkdtemp(prefix="curvine-bench-meta-", dir=args.dir or "/var/tmp"))
    try:
        results = [measure_size(n, args, root) for n in sizes]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    payload = {
        "benchmark": "meta",
        "machine": info,
        "parameters": {
            "files": sizes,
            "ops": args.ops,
            "threads": args.threads,
            "repeats": args.repeats,
            "quick": args.quick,
            "layout": f"all files in /{POP_DIR}",
            "filesystem": _fs_of(root.parent),
        },
        "results": results,
    }
    common.publish("meta", args, payload, render(payload))
    return 0


def _fs_of(path: pathlib.Path) -> str:
    best, kind = "", "?"
    try:
        for line in pathlib.Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if str(path).startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], f"{parts[2]} on {parts[0]}"
    except OSError:
        pass
    return kind


def render(payload: dict[str, Any]) -> str:
    params = payload["parameters"]
    body = [
        "## Master metadata ops/s",
        "",
        common.machine_line(payload["machine"]),
        "",
        (
            f"Real master process over gRPC (`MasterClient`), data dir on {params['filesystem']} (SQLite WAL, "
            f"fsync per commit, group commit). N existing files, {params['layout']}, populated in-process with "
            "the master's store API. Per op kind "
            f"{params['ops']} calls per repeat, median of {params['repeats']} repeats; 'x floor' = op rate / "
            "GetMembership rate at the same concurrency measured just before it (the RPC floor: the same gRPC "
            "and store-thread path, no SQL). create/rename/delete are durable writes; lookup = Lookup(parent, "
            "name), stat = ResolvePath(path), both of random existing files."
        ),
        "",
    ]
    headers = ["files", "threads", "floor ops/s"] + [f"{op} ops/s (x floor)" for op in OPS]
    rows = []
    for r in payload["results"]:
        for threads, summary in r["concurrency"].items():
            floor = common.median(s["baseline_median"] for s in summary.values())
            rows.append(
                [f"{r['files']:,}", threads, f"{floor:,.0f}"]
                + [f"{summary[op]['subject_median']:,.0f} ({summary[op]['ratio_median']:.2f}x)" for op in OPS]
            )
    body.append(common.table(headers, rows))
    sizes = payload["results"]
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        growth = []
        for threads in small["concurrency"]:
            if threads not in large["concurrency"]:
                continue
            cells = []
            for op in OPS:
                a = small["concurrency"][threads][op]["ratio_median"]
                b = large["concurrency"][threads][op]["ratio_median"]
                cells.append(f"{b / a:.2f}")
            growth.append([threads] + cells)
        body += [
            "",
            (
                f"How cost grows from {small['files']:,} to {large['files']:,} files: op rate at "
                f"{large['files']:,} / at {small['files']:,}, both relative to their own floor "
                "(1.00 = no slower):"
            ),
            "",
            common.table(["threads"] + list(OPS), growth),
        ]
    store_rows = [[f"{r['files']:,}"] + [f"{r['store_us_per_op'][op]:.0f}" for op in OPS] for r in sizes]
    body += [
        "",
        (
            "The store alone, in-process (`Namespace` calls, no gRPC, no fsync: each op kind in one "
            "transaction), microseconds per op: the SQL cost and how it grows with N."
        ),
        "",
        common.table(["files"] + list(OPS), store_rows),
    ]
    pops = ", ".join(
        f"{r['files']:,} files in {r['population']['seconds']:.0f} s ({r['population']['db_mib']:.0f} MiB)"
        for r in sizes
    )
    body += ["", f"Population (in-process, store API, 50k creates per transaction): {pops}."]
    return "\n".join(body)


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    raise SystemExit(main(sys.argv[1:]))
