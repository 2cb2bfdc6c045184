"""Where one create's time goes through a real master, on SQLite and on PostgreSQL (issue 12).

    python -m bench.meta_profile [--files 10000] [--ops 1000] [--repeats 3] [--threads 1] [--block 25]
                                 [--bench-order] [--json PATH]

Two master processes (SQLite, and PostgreSQL 15 from tests/pgserver.py with fsync on, as bench meta)
on the same population of N files in /pop, started through this module (`--serve-master`), which
stamps every call with time.perf_counter_ns (CLOCK_MONOTONIC: the client's and the master's stamps
are on one clock) before it runs the master's own main():

    client -> handler   client's call until MasterService.<method> is entered (gRPC both ways in, the
                        handler pool's dispatch, the request's parsing)
    handler -> queue    handler entry until StoreThread.call queues the call
    queue wait          queued until the store thread takes the batch
    begin               batch taken until the call's function starts (BEGIN, leadership check)
    function            the store call itself (Namespace.create / Membership.view); `sql` is the part
                        spent in the PostgreSQL session's statements (pgconn.run_statement / PgWriter.execute)
    commit              the function's end until the batch's COMMIT returned
    wake                COMMIT returned until the handler thread is back from the future
    reply               handler back until it returns (the reply's conversion)
    handler -> client   the handler's return until the client has the answer

The engines take turns every `--block` calls (GetMemberships, then as many creates); reported: the
median, mean and tail of each segment over all calls of all repeats (microseconds), for Create and
for GetMembership (the RPC floor of bench meta; at --threads above 1 only the creates are matched
to their stamps, by name), and creates/s. `--bench-order` runs bench meta's sequence: the store
in-process first, and each repeat's new names looked up, renamed and unlinked after the creates.
Next to them: the same curvine_create statement from a plain psycopg session on a copy of the
population (its own database, so the master's is untouched), its turn after both masters' in every
block, back to back and after a 1.5 ms pause each: what the statement with its commit costs
outside the master, and what an idle session's wait adds; PostgreSQL's own counters
(track_functions: the time inside curvine_create; track_wal_io_timing: per WAL fsync); the CPU
each process spent per call (master, the master's PostgreSQL backend, this client), from /proc.
"""
from __future__ import annotations

import argparse
import atexit
import bisect
import contextlib
import functools
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

STAMPS_ENV = "CURVINE_PROFILE_STAMPS"
SEGMENTS = ("client->handler", "handler->queue", "queue wait", "begin", "function", "sql", "commit", "wake",
            "reply", "handler->client", "total")
CPU = ("handler thread CPU", "store thread CPU (function)", "store thread CPU (commit)")
METHODS = ("Create", "GetMembership")
PAUSE_S = 0.0015       # a plain session's idle time before each statement, about the rest of a create's call


# -- inside the master process ----------------------------------------------------------------------
def instrument(records: list[dict[str, Any]]) -> None:
    """Patches stamps into the master's handler, store thread and PostgreSQL session (this process only)."""
    from curvine_py.master import service, storethread
    from curvine_py.master.namespace import Namespace
    from curvine_py.master.store import pgconn

    now = time.perf_counter_ns
    cpu = time.thread_time_ns
    handler_local = threading.local()      # the handler thread's record of the call it serves
    store_local = threading.local()        # the store thread's records of the batch it runs

    def stamped_handler(name: str) -> None:
        original = getattr(service.MasterService, name)

        @functools.wraps(original)
        def handler(self: Any, request: Any, context: Any) -> Any:
            record: dict[str, Any] = {"op": name, "h_in": now(), "h_cpu0": cpu(), "name": getattr(request, "name", "")}
            handler_local.record = record
            try:
                return original(self, request, context)
            finally:
                record["h_out"], record["h_cpu1"] = now(), cpu()
                handler_local.record = None
                records.append(record)
        setattr(service.MasterService, name, handler)

    for method in METHODS:
        stamped_handler(method)

    original_call = storethread.StoreThread.call

    def call(self: Any, fn: Callable[..., Any], *args: Any) -> Any:
        record = getattr(handler_local, "record", None)
        if record is None:                  # maintenance, or a method not stamped
            return original_call(self, fn, *args)

        def timed(*inner: Any) -> Any:
            record["got"] = getattr(store_local, "taken", 0)
            record["batch"] = getattr(store_local, "size", 0)
            store_local.sql = 0
            store_local.statements = 0
            store_local.pending.append(record)
            record["fn0"], record["s_cpu0"] = now(), cpu()
            try:
                return fn(*inner)
            finally:
                record["fn1"], record["s_cpu1"] = now(), cpu()
                record["sql"] = store_local.sql
                record["statements"] = store_local.statements
        record["put"] = now()
        try:
            return original_call(self, timed, *args)
        finally:
            record["woke"] = now()
    storethread.StoreThread.call = call  # type: ignore[method-assign]

    original_execute = storethread.StoreThread._execute

    def execute(self: Any, batch: list[Any]) -> None:
        store_local.taken, store_local.size, store_local.pending = now(), len(batch), []
        original_execute(self, batch)
    storethread.StoreThread._execute = execute  # type: ignore[method-assign]

    original_batch = Namespace.batch

    @contextlib.contextmanager
    def batch(self: Any, calls: int = 0, *, deferring: bool = False,
              then: Callable[[Any], None] | None = None) -> Iterator[None]:
        pending = getattr(store_local, "pending", [])

        def stamp() -> None:
            done, used = now(), cpu()
            for record in pending:
                record["committed"], record["s_cpu2"] = done, used

        def told(error: Any) -> None:       # a COMMIT left in flight answered (store/pgconn.py)
            stamp()
            assert then is not None
            then(error)
        with original_batch(self, calls, deferring=deferring, then=told if then is not None else None):
            yield
        if then is None:
            stamp()
    Namespace.batch = batch  # type: ignore[method-assign]

    def timing(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not hasattr(store_local, "sql"):
                return fn(*args, **kwargs)
            start = now()
            try:
                return fn(*args, **kwargs)
            finally:
                store_local.sql += now() - start
                store_local.statements += 1
        return timed
    pgconn.run_statement = timing(pgconn.run_statement)
    pgconn.PgWriter.execute = timing(pgconn.PgWriter.execute)  # type: ignore[method-assign]
    pgconn.PgWriter.defer = timing(pgconn.PgWriter.defer)  # type: ignore[method-assign]


def serve_master(argv: list[str]) -> int:
    records: list[dict[str, Any]] = []
    instrument(records)
    path = os.environ[STAMPS_ENV]

    def dump() -> None:
        pathlib.Path(path).write_text(json.dumps({"pid": os.getpid(), "records": records}))
    atexit.register(dump)
    from curvine_py.master import main as master_main
    return master_main.main(argv)


# -- the client ------------------------------------------------------------------------------------
def process_cpu_ns(pid: int) -> int:
    """utime + stime of a process, in ns (clock ticks from /proc)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def backend_pids(pg: Any, database: str) -> list[int]:
    out = pg.psql(f"SELECT pid FROM pg_stat_activity WHERE datname = '{database}' "
                  "AND application_name = 'curvine-py master'")
    return [int(x) for x in out.split()]


class Engine:
    """One master under the profiler."""

    def __init__(self, name: str, root: pathlib.Path, url: str, stack: contextlib.ExitStack, threads: int) -> None:
        from curvine_py.client.master import MasterClient
        from curvine_py.procs import start

        self.name = name
        self.threads = threads
        self.stamps = root / f"stamps-{name}.json"
        repo = pathlib.Path(__file__).resolve().parents[1]
        argv = [sys.executable, "-m", "bench.meta_profile", "--serve-master", "--data-dir", str(root / "master"),
                "--port", "0", *(["--meta", url] if url else [])]
        env = {STAMPS_ENV: str(self.stamps), "PYTHONPATH": f"{repo}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.process = start(f"master-{name}", argv, ready_prefix="master=", env=env)
        stack.callback(self.process.stop)
        self.client = MasterClient(self.process.address, timeout_s=60.0)
        stack.callback(self.client.close)
        self.client_stamps: dict[str, list[tuple[int, int, str]]] = {m: [] for m in METHODS}
        # Process CPU and wall time (ns) over the GetMembership phases and over the create phases.
        self.cpu = {phase: {"master": 0, "backend": 0, "client": 0, "calls": 0, "wall": 0} for phase in METHODS}

    def run(self, names: list[str], parent: int, backends: list[int]) -> None:
        """len(names) GetMemberships, then a create of each name, all stamped, on `threads` threads."""
        from bench.meta import run_concurrently
        from curvine_py.core.domain import NewNode
        from curvine_py.master.types import FileType

        now = time.perf_counter_ns
        m = self.client

        def membership() -> None:
            t0 = now()
            m.membership()
            self.client_stamps["GetMembership"].append((t0, now(), ""))

        def create(name: str) -> Callable[[], None]:
            def call() -> None:
                t0 = now()
                m.create(NewNode(parent, name, FileType.REGULAR, 0o644))
                self.client_stamps["Create"].append((t0, now(), name))
            return call

        for method, calls in (("GetMembership", [membership] * len(names)), ("Create", [create(n) for n in names])):
            before = (process_cpu_ns(self.process.process.pid), sum(process_cpu_ns(p) for p in backends),
                      time.process_time_ns(), now())
            run_concurrently(calls, self.threads)
            spent = self.cpu[method]
            spent["wall"] += now() - before[3]
            spent["master"] += process_cpu_ns(self.process.process.pid) - before[0]
            spent["backend"] += sum(process_cpu_ns(p) for p in backends) - before[1]
            spent["client"] += time.process_time_ns() - before[2]
            spent["calls"] += len(names)

    def clean(self, names: list[str], parent: int) -> None:
        """As bench meta does after its creates: a lookup, a rename and an unlink of each (not stamped)."""
        m = self.client
        for name in names:
            m.lookup(parent, name)
        for name in names:
            m.rename(parent, name, parent, name + ".r")
        for name in names:
            m.unlink(parent, name + ".r")

    def segments(self) -> dict[str, dict[str, float]]:
        """{method: {segment: median us}} from the master's stamps, once it stopped."""
        self.process.stop()
        records = json.loads(self.stamps.read_text())["records"]
        out: dict[str, dict[str, float]] = {}
        for method in METHODS:
            mine = sorted((r for r in records if r["op"] == method and "woke" in r), key=lambda r: r["h_in"])
            pairs = []
            if method == "Create":                 # each create names its file
                by_name = {r["name"]: r for r in mine}
                pairs = [((c0, c1), by_name[n]) for c0, c1, n in self.client_stamps[method] if n in by_name]
            elif self.threads == 1:                # one call at a time: the record whose handler ran inside it
                starts = [r["h_in"] for r in mine]
                for c0, c1, _ in self.client_stamps[method]:
                    at = bisect.bisect_left(starts, c0)
                    if at < len(mine) and mine[at]["h_out"] <= c1:
                        pairs.append(((c0, c1), mine[at]))
            values: dict[str, list[float]] = {s: [] for s in (*SEGMENTS, *CPU)}
            values["batch size"] = []
            for (c0, c1), r in pairs:
                parts = {
                    "client->handler": r["h_in"] - c0,
                    "handler->queue": r["put"] - r["h_in"],
                    "queue wait": r["got"] - r["put"],
                    "begin": r["fn0"] - r["got"],
                    "function": r["fn1"] - r["fn0"],
                    "sql": r["sql"],
                    "commit": r["committed"] - r["fn1"],
                    "wake": r["woke"] - r["committed"],
                    "reply": r["h_out"] - r["woke"],
                    "handler->client": c1 - r["h_out"],
                    "total": c1 - c0,
                    "handler thread CPU": r["h_cpu1"] - r["h_cpu0"],
                    "store thread CPU (function)": r["s_cpu1"] - r["s_cpu0"],
                    "store thread CPU (commit)": r["s_cpu2"] - r["s_cpu1"],
                }
                for key, ns in parts.items():
                    values[key].append(ns / 1000)
                values["batch size"].append(float(r["batch"]))
            out[method] = {k: statistics.median(v) for k, v in values.items() if v}
            out[method].update({f"{k} mean": statistics.fmean(v) for k, v in values.items() if v})
            total = sorted(values["total"])
            if total:
                out[method]["total p90"] = total[len(total) * 9 // 10]
                out[method]["total p99"] = total[len(total) * 99 // 100]
                out[method]["total max"] = total[-1]
            out[method]["calls"] = len(pairs)
        return out


class Plain:
    """curvine_create (the master's one statement per create, committed by itself) from a plain
    psycopg session, as the master sends it, on its own copy of the population."""

    def __init__(self, url: str, stack: contextlib.ExitStack, *, pause_s: float = 0.0, tag: str = "") -> None:
        from curvine_py.master.engine.url import parse_meta_url
        from curvine_py.master.store.pgengine import connect

        self.conn = connect(parse_meta_url(url), application="curvine-py profile")
        stack.callback(self.conn.close)
        self.samples: list[float] = []
        self.pause_s = pause_s      # idle before each statement, as the master's session is between creates
        self.tag = tag

    def run(self, names: list[str], parent: int, _backends: list[int]) -> None:
        for name in names:
            if self.pause_s:
                time.sleep(self.pause_s)
            params = (parent, f"plain{self.tag}-{name}", 1, 0o644, 0, 0, 0, 1, 0, None, time.time_ns(), 4 << 20)
            t0 = time.perf_counter_ns()
            self.conn.execute("SELECT * FROM curvine_create(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                              params).fetchone()
            self.samples.append((time.perf_counter_ns() - t0) / 1000)


def server_stats(pg: Any) -> dict[str, float]:
    """curvine_create's calls and ms in the master's database, WAL fsyncs and their ms (all databases)."""
    calls, ms = (pg.psql("SELECT coalesce(sum(calls), 0), coalesce(sum(self_time), 0) FROM pg_stat_user_functions "
                         "WHERE funcname = 'curvine_create'", database="meta").split("|"))
    syncs, sync_ms = pg.psql("SELECT wal_sync, wal_sync_time FROM pg_stat_wal").split("|")
    return {"calls": float(calls), "ms": float(ms), "syncs": float(syncs), "sync_ms": float(sync_ms)}


def server_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    calls, syncs = after["calls"] - before["calls"], after["syncs"] - before["syncs"]
    return {"curvine_create calls": calls, "curvine_create us": (after["ms"] - before["ms"]) * 1000 / max(calls, 1),
            "wal syncs": syncs, "wal sync us": (after["sync_ms"] - before["sync_ms"]) * 1000 / max(syncs, 1)}


def profile(args: argparse.Namespace) -> dict[str, Any]:
    from bench import common
    from bench.meta import POP_DIR, copy_to_postgresql, populate, store_costs
    from tests.pgserver import PgServer

    root = pathlib.Path(tempfile.mkdtemp(prefix="curvine-meta-profile-", dir=args.dir or "/var/tmp"))
    result: dict[str, Any] = {"machine": common.machine(), "files": args.files, "ops": args.ops,
                              "repeats": args.repeats, "threads": args.threads, "block": args.block,
                              "bench_order": args.bench_order}
    try:
        with contextlib.ExitStack() as stack:
            pg = stack.enter_context(PgServer(root / "pg"))
            pg.psql("ALTER SYSTEM SET fsync = on")
            pg.psql("ALTER SYSTEM SET full_page_writes = on")
            # The server's own view: time inside each function, time spent in WAL fsyncs.
            pg.psql("ALTER SYSTEM SET track_functions = 'pl'")
            pg.psql("ALTER SYSTEM SET track_wal_io_timing = on")
            pg.restart()
            print(f"populating {args.files:,} files", flush=True)
            populate(root / "sqlite" / "master", args.files)
            url = pg.url("meta")
            copy_to_postgresql(root / "sqlite" / "master", url)
            plain_url = pg.url("plain")
            copy_to_postgresql(root / "sqlite" / "master", plain_url)
            if args.bench_order:      # bench meta measures the store in-process first, on the same data
                for r in range(args.repeats):
                    for engine_url in ("", url):
                        store_costs(root / "sqlite" / "master", args.files, args.ops, 1, engine_url, f"r{r}")
            engines = {"sqlite": Engine("sqlite", root / "sqlite", "", stack, args.threads),
                       "postgresql": Engine("postgresql", root / "pg-master", url, stack, args.threads)}
            parent = engines["sqlite"].client.lookup(1, POP_DIR).ino
            backends = {"sqlite": [], "postgresql": backend_pids(pg, "meta")}
            for engine in engines.values():
                engine.client.membership()
            plain = Plain(plain_url, stack)
            paused = Plain(plain_url, stack, pause_s=PAUSE_S, tag="-paused")
            server_before = server_stats(pg)
            for r in range(args.repeats):
                order = list(engines) if r % 2 == 0 else list(engines)[::-1]
                names = [f"profile-r{r}-{i:06d}" for i in range(args.ops)]
                # The engines take turns every `block` calls: both see the same load of a shared machine.
                for first in range(0, args.ops, args.block):
                    for name in order:
                        engines[name].run(names[first:first + args.block], parent, backends[name])
                    plain.run(names[first:first + args.block], parent, [])
                    paused.run(names[first:first + args.block], parent, [])
                if args.bench_order:
                    for name in order:
                        engines[name].clean(names, parent)
            for name, engine in engines.items():
                result[name] = engine.segments()      # stops the master: its backend's counters are in
                for method, spent in engine.cpu.items():
                    calls = max(spent["calls"], 1)
                    result[name].setdefault(method, {})["process CPU"] = {
                        k: v / calls / 1000 for k, v in spent.items() if k not in ("calls", "wall")}
                    result[name][method]["per second"] = spent["calls"] / max(spent["wall"], 1) * 1e9
            time.sleep(1.5)                             # the stats collector has every backend's counters
            result["server"] = server_delta(server_before, server_stats(pg))
            result["plain_statement_us"] = statistics.median(plain.samples)
            result["plain_statement_mean_us"] = statistics.fmean(plain.samples)
            result["paused_statement_us"] = statistics.median(paused.samples)
            result["paused_statement_mean_us"] = statistics.fmean(paused.samples)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return result


def render(result: dict[str, Any]) -> str:
    engines = ("sqlite", "postgresql")
    lines = [(f"{result['files']:,} files in /pop, {result['ops']} calls of each per repeat, {result['repeats']} "
              f"repeats, {result['threads']} client thread(s), the engines taking turns every {result['block']} "
              f"calls{' (bench order)' if result['bench_order'] else ''}; microseconds per call:"), "",
             "| segment | " + " | ".join(f"{e} {m}" for e in engines for m in METHODS) + " |",
             "|---|" + "---|" * 4]
    rows = [*SEGMENTS, "batch size", "total p90", "total p99", "total max",
            *(f"{s} mean" for s in (*SEGMENTS, "batch size", *CPU))]
    for segment in rows:
        cells = [result[e][m].get(segment, 0.0) for e in engines for m in METHODS]
        lines.append(f"| {segment} | " + " | ".join(f"{c:,.0f}" if "batch size" not in segment else f"{c:.2f}"
                                                   for c in cells) + " |")
    rates = {e: result[e]["Create"]["per second"] for e in engines}
    floors = {e: result[e]["GetMembership"]["per second"] for e in engines}
    lines += ["", "creates/s: " + ", ".join(f"{e} {rates[e]:,.0f} ({rates[e] / floors[e]:.2f}x its floor "
                                            f"{floors[e]:,.0f}/s)" for e in engines)
              + f"; PostgreSQL / SQLite {rates['postgresql'] / rates['sqlite']:.2f}", ""]
    lines.append(f"curvine_create from a plain psycopg session (same statement, committed alone, its turn after "
                 f"both masters' in every block): median {result['plain_statement_us']:,.0f} us, mean "
                 f"{result['plain_statement_mean_us']:,.0f} us; after a {PAUSE_S * 1000:.1f} ms pause before each "
                 f"(the master's session idles between creates): median {result['paused_statement_us']:,.0f} us, "
                 f"mean {result['paused_statement_mean_us']:,.0f} us")
    server = result["server"]
    lines.append(f"PostgreSQL's own counters over the same calls: {server['curvine_create us']:,.0f} us inside "
                 f"curvine_create ({server['curvine_create calls']:,.0f} calls), {server['wal sync us']:,.0f} us "
                 f"per WAL fsync ({server['wal syncs']:,.0f} of them, every database)")
    for engine in engines:
        for method in METHODS:
            spent = result[engine][method]["process CPU"]
            lines.append(f"{engine} {method}: process CPU per call: "
                         + ", ".join(f"{k} {v:,.0f} us" for k, v in spent.items()))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve-master"]:
        return serve_master(argv[1:])
    p = argparse.ArgumentParser(prog="python -m bench.meta_profile", description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=10_000, help="files in /pop (default 10000)")
    p.add_argument("--ops", type=int, default=1000, help="creates (and GetMemberships) per repeat (default 1000)")
    p.add_argument("--repeats", type=int, default=3, help="repeats, the engines taking turns (default 3)")
    p.add_argument("--dir", default="", help="where to build the data dirs (default: a temp dir on /var/tmp)")
    p.add_argument("--threads", type=int, default=1,
                   help="client threads (default 1; above 1 the GetMembership segments are not matched)")
    p.add_argument("--block", type=int, default=25, help="calls per turn of an engine (default 25)")
    p.add_argument("--bench-order", action="store_true",
                   help="as bench meta: the store in-process first, and each repeat's new names looked up, "
                        "renamed and unlinked after the creates")
    p.add_argument("--json", default="", help="also write the result here")
    args = p.parse_args(argv)
    result = profile(args)
    print(render(result))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    raise SystemExit(main(sys.argv[1:]))
