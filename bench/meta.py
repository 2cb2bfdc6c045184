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
as one client process would). The baseline, measured in turns with the op (as many calls right
before every 100 of them), is the RPC floor: GetMembership at the same concurrency (no SQL, but
the same gRPC handler path through the master's store thread). Reported: ops/s (median of
repeats) and op / floor.

Engines (`--engines`, default both): SQLite (the data dir's file) and PostgreSQL (a throwaway
cluster from tests/pgserver.py on the same disk, with fsync on, as SQLite's synchronous=FULL), in
the same run on the same population (the SQLite namespace moved with `meta load`'s code, which
ends with ANALYZE and VACUUM; then a CHECKPOINT, as SQLite's WAL is checkpointed after populating).
Every size is populated first, then all masters (each size on each engine) run at once and take
turns every 100 calls of each op (the store in-process: every repeat), so PostgreSQL / SQLite and
the growth from the smallest size to the largest are medians of per-repeat ratios of measurements
interleaved within a second or so.
"""

from __future__ import annotations

import contextlib
import pathlib
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from bench import common
from curvine_py.core.domain import FileType, NewNode

POP_DIR = "pop"
POP_BATCH = 50_000
OPS = ("create", "lookup", "stat", "rename", "delete")
TURN = 100          # calls of one engine before the other's turn (each after as many GetMemberships)
T = TypeVar("T")


def file_name(index: int) -> str:
    return f"kv-chunk-{index:09d}"


# -- population (in-process, the master's own store API) ------------------------------------------
def populate(data_dir: pathlib.Path, files: int) -> dict[str, float]:
    from curvine_py.master.main import DB_FILE
    from curvine_py.master.namespace import Namespace

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


def copy_to_postgresql(data_dir: pathlib.Path, url: str) -> float:
    """Loads the SQLite namespace of `data_dir` into the (new) PostgreSQL database `url`, as
    `meta load` does; returns the seconds it took."""
    import io

    from curvine_py.master.engine import transfer
    from curvine_py.master.engine.dumpfile import DumpReader
    from curvine_py.master.engine.open import open_namespace
    from curvine_py.master.engine.url import parse_meta_url
    from curvine_py.master.main import DB_FILE
    from curvine_py.master.namespace import Namespace

    start = time.perf_counter()
    source = Namespace(str(data_dir / DB_FILE), read_only=True)
    buffer = io.BytesIO()
    try:
        with source.snapshot():
            transfer.dump(source, buffer)
    finally:
        source.close()
    buffer.seek(0)
    target = open_namespace(parse_meta_url(url))
    try:
        transfer.load(target, DumpReader(buffer), force=True)
    finally:
        target.close()
    return time.perf_counter() - start


def open_store(data_dir: pathlib.Path, url: str) -> Any:
    from curvine_py.master.engine.open import open_namespace
    from curvine_py.master.engine.url import parse_meta_url
    from curvine_py.master.main import DB_FILE
    from curvine_py.master.namespace import Namespace

    return open_namespace(parse_meta_url(url)) if url else Namespace(str(data_dir / DB_FILE))


def store_costs(data_dir: pathlib.Path, files: int, ops: int, repeats: int, url: str = "",
                tag: str = "") -> dict[str, list[float]]:
    """Microseconds per op of the master's store itself, in-process (no gRPC, no store thread): the
    SQL cost and how it grows with N. Each op kind runs inside one transaction, so no fsync is
    counted here (the gRPC numbers include it). `url`: the PostgreSQL database instead. Returns
    every repeat's sample per op."""

    ns = open_store(data_dir, url)
    rng = random.Random(files + 1)
    samples: dict[str, list[float]] = {op: [] for op in OPS}
    try:
        parent = ns.lookup(1, POP_DIR).ino
        for r in range(repeats):
            fresh = [f"store-{tag}{r}-{i:06d}" for i in range(ops)]
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
        if not url:
            ns._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        ns.close()
    return samples


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
        self.master = master
        self.files = files
        self.ops = ops
        self.rng = random.Random(seed)
        self.parent = master.lookup(1, POP_DIR).ino

    def floor(self, threads: int) -> float:
        return run_concurrently([self.master.membership] * self.ops, threads)

    def work(self, tag: str) -> dict[str, list[Callable[[], object]]]:
        """One repeat's calls of every op kind: creates of new names, lookups and stats of random
        existing ones, then a rename and an unlink of each new name (in OPS order)."""
        m, parent = self.master, self.parent
        fresh = [f"new-{tag}-{i:06d}" for i in range(self.ops)]
        existing = [file_name(self.rng.randrange(self.files)) for _ in range(self.ops)]

        def create(name: str) -> Callable[[], object]:
            return lambda: m.create(NewNode(parent=parent, name=name, type=FileType.REGULAR, mode=0o644, exclusive=True))

        return {
            "create": [create(n) for n in fresh],
            "lookup": [lambda n=n: m.lookup(parent, n) for n in existing],
            "stat": [lambda n=n: m.resolve(f"/{POP_DIR}/{n}") for n in existing],
            "rename": [lambda n=n: m.rename(parent, n, parent, n + ".r") for n in fresh],
            "delete": [lambda n=n: m.unlink(parent, n + ".r") for n in fresh],
        }

    def seconds(self, calls: Sequence[Callable[[], object]], threads: int) -> tuple[float, float]:
        """(seconds of the calls, seconds of as many GetMemberships right before them)."""
        floor = len(calls) / run_concurrently([self.master.membership] * len(calls), threads)
        return len(calls) / run_concurrently(calls, threads), floor


def prepare_size(files: int, args: Any, root: pathlib.Path,
                 pg: Any = None) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[pathlib.Path, str]]]:
    """Populates one namespace size (SQLite, then loaded into PostgreSQL as `meta load` does): the
    result skeleton per engine and where each engine's master runs."""
    print(f"  {files:,} files: populating", flush=True)
    data_root = root / f"n{files}"
    population = populate(data_root / "master", files)
    print(
        f"    populated in {population['seconds']:.1f} s ({population['files_per_s']:,.0f} files/s, "
        f"{population['db_mib']:.0f} MiB)",
        flush=True,
    )
    urls: dict[str, str] = {}
    seconds = 0.0
    if "sqlite" in args.engines:
        urls["sqlite"] = ""
    if pg is not None:
        urls["postgresql"] = pg.url(f"n{files}")
        seconds = copy_to_postgresql(data_root / "master", urls["postgresql"])
        print(f"    loaded into PostgreSQL in {seconds:.1f} s", flush=True)
    out: dict[str, dict[str, Any]] = {}
    for engine, url in urls.items():
        pop = dict(population)
        if url:
            pop["load_seconds"] = seconds
        out[engine] = {"files": files, "engine": engine, "population": pop, "store_us_per_op": {},
                       "concurrency": {}}
    return out, {e: (data_root if not url else root / f"pg{files}", url) for e, url in urls.items()}


def measure_sizes(sizes: list[int], args: Any, root: pathlib.Path, pg: Any = None) -> list[dict[str, dict[str, Any]]]:
    """{engine: result} per namespace size. Every size is populated first; then all of them, on both
    engines, take turns within every repeat (all masters run at once), so PostgreSQL / SQLite and
    the growth from the smallest to the largest size are ratios of measurements seconds apart: the
    load of a shared machine drifts over minutes (a size measured 20 minutes after another, at
    load 11 instead of 6, read as a 0.54-0.81 "degradation" in an earlier run)."""
    outs: dict[int, dict[str, dict[str, Any]]] = {}
    clusters: dict[tuple[int, str], tuple[pathlib.Path, str]] = {}
    for files in sizes:
        outs[files], where = prepare_size(files, args, root, pg)
        clusters.update({(files, engine): place for engine, place in where.items()})
    if pg is not None:
        # As SQLite's population ends with a checkpoint of its WAL (populate): the masters start
        # on a quiet server, not under the load's checkpoint writes.
        pg.psql("CHECKPOINT")
    keys = list(clusters)
    store_samples: dict[tuple[int, str], dict[str, list[float]]] = {k: {op: [] for op in OPS} for k in keys}
    for r in range(args.repeats):
        for files, engine in _turns(keys, r):
            data_root = root / f"n{files}" / "master"
            url = clusters[(files, engine)][1]
            for op, values in store_costs(data_root, files, args.ops, 1, url, f"r{r}").items():
                store_samples[(files, engine)][op] += values
    for (files, engine), samples in store_samples.items():
        out = outs[files][engine]
        out["store_us_per_op"] = {op: common.median(v) for op, v in samples.items()}
        out["store_us_samples"] = samples
        print(f"    {engine} {files:,} store in-process: "
              + ", ".join(f"{op} {us:.0f} us" for op, us in out["store_us_per_op"].items()), flush=True)
    measure_engines(args, clusters, outs)
    return [outs[files] for files in sizes]


def _turns(keys: list[T], repeat: int) -> list[T]:
    """Who goes first alternates between repeats: neither always inherits the other's warm caches."""
    return keys if repeat % 2 == 0 else keys[::-1]


def measure_engines(args: Any, clusters: dict[tuple[int, str], tuple[pathlib.Path, str]],
                    outs: dict[int, dict[str, dict[str, Any]]]) -> None:
    from curvine_py.client.master import MasterClient
    from tests.harness import Cluster

    with contextlib.ExitStack() as stack:
        runs: dict[tuple[int, str], MetaRun] = {}
        for (files, engine), (cluster_root, url) in clusters.items():
            cluster = stack.enter_context(Cluster(cluster_root, workers=0, master_args=["--meta", url] if url else []))
            master = MasterClient(cluster.master_address, timeout_s=60.0)
            stack.callback(master.close)
            runs[(files, engine)] = MetaRun(master, files, args.ops, seed=files)
            runs[(files, engine)].floor(1)  # warm the channel and the master
        for threads in args.threads:
            per_op: dict[tuple[int, str], dict[str, list[tuple[float, float]]]] = {
                k: {op: [] for op in OPS} for k in runs}
            for r in range(args.repeats):
                order = _turns(list(runs), r)
                work = {k: runs[k].work(f"c{threads}r{r}") for k in order}
                for op in OPS:
                    # Everyone takes turns every TURN calls (floor, then op): a shared machine's
                    # load drifts within seconds, and a ratio of measurements 10 s apart was noise
                    # (per-repeat PostgreSQL / SQLite creates from 0.13 to 0.89 in one run).
                    spent = {k: [0.0, 0.0] for k in order}
                    for first in range(0, args.ops, TURN):
                        for k in order:
                            took, floor = runs[k].seconds(work[k][op][first:first + TURN], threads)
                            spent[k][0] += took
                            spent[k][1] += floor
                    for k in order:
                        per_op[k][op].append((args.ops / spent[k][0], args.ops / spent[k][1]))
            for (files, engine), ops in per_op.items():
                summary = {}
                for op, pairs in ops.items():
                    p = common.Paired(tuple(s for s, _ in pairs), tuple(b for _, b in pairs))
                    summary[op] = p.summary()
                outs[files][engine]["concurrency"][str(threads)] = summary
                cells = ", ".join(
                    f"{op} {s['subject_median']:,.0f}/s ({s['ratio_median']:.2f}x floor)"
                    for op, s in summary.items()
                )
                print(
                    f"    {engine} {files:,} threads {threads}: {cells}; "
                    f"floor {summary['create']['baseline_median']:,.0f}/s",
                    flush=True,
                )


def main(argv: list[str]) -> int:
    p = common.parser("meta", __doc__.splitlines()[0])
    p.add_argument("--files", default="10000,1000000", help="namespace sizes (default 10000,1000000)")
    p.add_argument("--ops", type=int, default=1000, help="operations per op kind per repeat (default 1000)")
    p.add_argument("--threads", default="1,8", help="client concurrencies (default 1,8)")
    p.add_argument("--engines", default="sqlite,postgresql",
                   help="metadata engines, measured in the same run (default sqlite,postgresql)")
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
    args.engines = [x for x in args.engines.split(",") if x]
    if not set(args.engines) <= {"sqlite", "postgresql"} or not args.engines:
        p.error("--engines: sqlite and/or postgresql")
    info = common.machine()
    print(
        f"meta: files {sizes}, {args.ops} ops per op kind, threads {args.threads}, {args.repeats} repeats",
        flush=True,
    )
    root = pathlib.Path(tempfile.mkdtemp(prefix="curvine-bench-meta-", dir=args.dir or "/var/tmp"))
    try:
        with contextlib.ExitStack() as stack:
            pg = None
            if "postgresql" in args.engines:
                from tests.pgserver import PgServer
                pg = stack.enter_context(PgServer(root / "pg"))
                # As durable as SQLite's synchronous=FULL: the tests' cluster runs with fsync off.
                pg.psql("ALTER SYSTEM SET fsync = on")
                pg.psql("ALTER SYSTEM SET full_page_writes = on")
                pg.restart()
            measured = measure_sizes(sizes, args, root, pg)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    # `results` keeps its shape (SQLite, or the one engine measured): bench/plots.py reads it.
    first = args.engines[0] if "sqlite" not in args.engines else "sqlite"
    results = [m[first] for m in measured]
    postgresql = [m["postgresql"] for m in measured if "postgresql" in m and first != "postgresql"]
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
            "engines": args.engines,
            "turn": TURN,
        },
        "results": results,
        "postgresql": postgresql,
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


def _ops_table(results: list[dict[str, Any]]) -> str:
    headers = ["files", "threads", "floor ops/s"] + [f"{op} ops/s (x floor)" for op in OPS]
    rows = []
    for r in results:
        for threads, summary in r["concurrency"].items():
            floor = common.median(s["baseline_median"] for s in summary.values())
            rows.append(
                [f"{r['files']:,}", threads, f"{floor:,.0f}"]
                + [f"{summary[op]['subject_median']:,.0f} ({summary[op]['ratio_median']:.2f}x)" for op in OPS]
            )
    return common.table(headers, rows)


def _growth(results: list[dict[str, Any]], engine: str) -> list[str]:
    if len(results) < 2:
        return []
    small, large = results[0], results[-1]
    growth = []
    for threads in small["concurrency"]:
        if threads not in large["concurrency"]:
            continue
        cells = []
        for op in OPS:
            a, b = small["concurrency"][threads][op], large["concurrency"][threads][op]
            # The sizes took turns in every repeat: the median of the per-repeat rate ratios.
            ratio = common.median(q / p for p, q in zip(a["subject"], b["subject"], strict=True) if p > 0)
            cells.append(f"{ratio:.2f}")
        growth.append([threads] + cells)
    return [
        "",
        (
            f"{engine}: how cost grows from {small['files']:,} to {large['files']:,} files: op rate at "
            f"{large['files']:,} / at {small['files']:,}, median of the per-repeat ratios (the sizes take "
            "turns every 100 calls, as the engines do; 1.00 = no slower; target of issue 12: >= 0.8):"
        ),
        "",
        common.table(["threads"] + list(OPS), growth),
    ]


def _versus(sqlite: list[dict[str, Any]], postgresql: list[dict[str, Any]]) -> list[str]:
    rows = []
    for a, b in zip(sqlite, postgresql, strict=False):
        for threads in a["concurrency"]:
            if threads not in b["concurrency"]:
                continue
            cells = []
            for op in OPS:
                x, y = a["concurrency"][threads][op], b["concurrency"][threads][op]
                # The engines took turns in every repeat: the median of the per-repeat ratios.
                pairs = list(zip(x.get("subject", ()), y.get("subject", ()), strict=False))
                ratio = (common.median(q / p for p, q in pairs if p > 0) if pairs
                         else y["subject_median"] / x["subject_median"])
                cells.append(f"{ratio:.2f}")
            rows.append([f"{a['files']:,}", threads] + cells)
    return [
        "",
        ("PostgreSQL / SQLite: the op rate on PostgreSQL over the rate on SQLite, same size, same threads, "
         "median of the per-repeat ratios (the engines take turns every 100 calls; targets of issue 12: "
         "create >= 0.8 at 1 thread, >= 1 at 8):"),
        "",
        common.table(["files", "threads"] + list(OPS), rows),
    ]


def render(payload: dict[str, Any]) -> str:
    params = payload["parameters"]
    sizes = payload["results"]
    postgresql = payload.get("postgresql") or []
    first = sizes[0]["engine"] if sizes and "engine" in sizes[0] else "sqlite"
    body = [
        "## Master metadata ops/s",
        "",
        common.machine_line(payload["machine"]),
        "",
        (
            f"Real master process over gRPC (`MasterClient`), data dir on {params['filesystem']} (SQLite WAL, "
            f"fsync per commit, group commit). N existing files, {params['layout']}, populated in-process with "
            "the master's store API; every size on every engine runs at once and they take turns every 100 calls. "
            "Per op kind "
            f"{params['ops']} calls per repeat, median of {params['repeats']} repeats; 'x floor' = op rate / "
            "GetMembership rate at the same concurrency measured just before it (the RPC floor: the same gRPC "
            "and store-thread path, no SQL). create/rename/delete are durable writes; lookup = Lookup(parent, "
            "name), stat = ResolvePath(path), both of random existing files."
        ),
        "",
        f"{'SQLite' if first == 'sqlite' else 'PostgreSQL'}:",
        "",
        _ops_table(sizes),
    ]
    if postgresql:
        body += [
            "",
            ("PostgreSQL 15 (`--meta postgresql://`, a local cluster on the same disk, fsync on; the same "
             "population, loaded with `meta load`'s code (COPY, ANALYZE, VACUUM), then a CHECKPOINT; readers "
             "from a pool of 8 sessions):"),
            "",
            _ops_table(postgresql),
        ]
        body += _versus(sizes, postgresql)
    body += _growth(sizes, "SQLite" if first == "sqlite" else "PostgreSQL")
    if postgresql:
        body += _growth(postgresql, "PostgreSQL")
    store_rows = [[r.get("engine", "sqlite"), f"{r['files']:,}"] + [f"{r['store_us_per_op'][op]:.0f}" for op in OPS]
                  for r in [*sizes, *postgresql]]
    body += [
        "",
        (
            "The store alone, in-process (`Namespace` calls, no gRPC, no fsync: each op kind in one "
            "transaction), microseconds per op: the SQL cost and how it grows with N."
        ),
        "",
        common.table(["engine", "files"] + list(OPS), store_rows),
    ]
    pops = ", ".join(
        f"{r['files']:,} files in {r['population']['seconds']:.0f} s ({r['population']['db_mib']:.0f} MiB)"
        for r in sizes
    )
    body += ["", f"Population (in-process, store API, 50k creates per transaction): {pops}."]
    if postgresql:
        loads = ", ".join(f"{r['files']:,} files in {r['population'].get('load_seconds', 0):.0f} s"
                          for r in postgresql)
        body += [f"Loaded into PostgreSQL (dump + load, COPY): {loads}.",
                 "",
                 ("What a call costs on PostgreSQL (one statement per create, unlink, rename, lookup and "
                  "stat; a batch's creates and unlinks answered with its COMMIT), why the create targets "
                  "still miss, and what remains: docs/metadata.md, PostgreSQL, Speed.")]
    return "\n".join(body)


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    raise SystemExit(main(sys.argv[1:]))
