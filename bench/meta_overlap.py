"""`python -m bench.meta_overlap`: PostgreSQL group commit with the COMMIT left in flight (the next
batch sent behind it, store/pgconn.py) against every batch waiting for its own COMMIT.

Both run in this process on one PostgreSQL cluster (tests/pgserver.py, fsync on, as bench meta),
each a Namespace on its own database with N files in /pop and its own StoreThread (`overlap=True`
and `overlap=False`), driven by 1 and 8 threads calling `StoreThread.call(ns.create, ...)` (what a
master's handler threads do, without gRPC). The two take turns every 100 creates, so the ratio
(overlap / not) is of measurements interleaved within a second; the median of per-repeat ratios is
reported, with the mean batch size and the share of batches that went behind a COMMIT in flight.
"""
from __future__ import annotations

import pathlib
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from bench import common
from bench.meta import POP_DIR, TURN, file_name, run_concurrently
from curvine_py.core.domain import FileType


def main(argv: list[str]) -> int:
    p = common.parser("meta-overlap", __doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=10_000, help="files in /pop before (default 10000)")
    p.add_argument("--ops", type=int, default=1000, help="creates per mode per repeat (default 1000)")
    p.add_argument("--threads", default="1,8", help="client concurrencies (default 1,8)")
    args = p.parse_args(argv)
    if args.quick:
        args.files, args.ops, args.repeats = min(args.files, 1000), min(args.ops, 200), min(args.repeats, 2)
    threads_list = [int(x) for x in args.threads.split(",") if x]
    from curvine_py.master.engine.open import open_namespace
    from curvine_py.master.engine.url import parse_meta_url
    from curvine_py.master.storethread import StoreThread
    from tests.pgserver import PgServer

    info = common.machine()
    root = pathlib.Path(tempfile.mkdtemp(prefix="curvine-bench-overlap-", dir="/var/tmp"))
    out: dict[str, Any] = {}
    try:
        with PgServer(root / "pg") as pg:
            pg.psql("ALTER SYSTEM SET fsync = on")
            pg.psql("ALTER SYSTEM SET full_page_writes = on")
            pg.restart()
            stores: dict[str, tuple[Any, StoreThread, int]] = {}
            for mode in ("overlap", "wait"):
                ns = open_namespace(parse_meta_url(pg.url(mode)))
                parent = ns.mkdir(1, POP_DIR).ino
                with ns.batch():
                    for i in range(args.files):
                        ns.create(parent, file_name(i), FileType.REGULAR, 0o644)
                thread = StoreThread(ns, overlap=mode == "overlap")
                thread.start()
                stores[mode] = (ns, thread, parent)
            try:
                for threads in threads_list:
                    out[str(threads)] = measure(stores, threads, args)
                    cell = out[str(threads)]
                    print(f"threads {threads}: overlap {cell['overlap']['median']:,.0f}/s, wait "
                          f"{cell['wait']['median']:,.0f}/s, ratio {cell['ratio_median']:.2f} "
                          f"(batch {cell['overlap']['calls_per_batch']:.1f} calls, "
                          f"{cell['overlap']['overlapped_share']:.0%} overlapped)", flush=True)
            finally:
                for ns, thread, _ in stores.values():
                    thread.stop()
                    ns.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    payload = {"benchmark": "meta-overlap", "machine": info,
               "parameters": {"files": args.files, "ops": args.ops, "threads": threads_list,
                              "repeats": args.repeats, "turn": TURN}, "results": out}
    print(render(payload))
    if not args.no_write:
        path = common.write_json("meta-overlap", payload, quick=args.quick)
        print(f"wrote {path}", file=sys.stderr)
    return 0


def creates(store: tuple[Any, Any, int], names: list[str]) -> list[Callable[[], object]]:
    ns, thread, parent = store
    return [lambda n=n: thread.call(ns.create, parent, n, FileType.REGULAR, 0o644) for n in names]


def measure(stores: dict[str, tuple[Any, Any, int]], threads: int, args: Any) -> dict[str, Any]:
    rates: dict[str, list[float]] = {mode: [] for mode in stores}
    start = {mode: (thread.batches, thread.calls, ns._db.overlapped) for mode, (ns, thread, _) in stores.items()}
    for r in range(args.repeats):
        order = list(stores) if r % 2 == 0 else list(stores)[::-1]
        spent = dict.fromkeys(stores, 0.0)
        for first in range(0, args.ops, TURN):
            for mode in order:
                calls = creates(stores[mode], [f"t{threads}r{r}-{i}" for i in range(first, min(args.ops, first + TURN))])
                spent[mode] += len(calls) / run_concurrently(calls, threads)
        for mode in stores:
            rates[mode].append(args.ops / spent[mode])
    cell: dict[str, Any] = {}
    for mode, (ns, thread, _) in stores.items():
        batches = thread.batches - start[mode][0]
        cell[mode] = {"per_repeat": rates[mode], "median": common.median(rates[mode]),
                      "calls_per_batch": (thread.calls - start[mode][1]) / max(batches, 1),
                      "overlapped_share": (ns._db.overlapped - start[mode][2]) / max(batches, 1)}
    cell["ratio_median"] = common.median(a / b for a, b in zip(rates["overlap"], rates["wait"], strict=True))
    return cell


def render(payload: dict[str, Any]) -> str:
    rows = [[threads, f"{c['wait']['median']:,.0f}", f"{c['overlap']['median']:,.0f}", f"{c['ratio_median']:.2f}",
             f"{c['overlap']['calls_per_batch']:.1f}", f"{c['overlap']['overlapped_share']:.0%}"]
            for threads, c in payload["results"].items()]
    return "\n".join([common.machine_line(payload["machine"]), "",
                      common.table(["threads", "creates/s, each COMMIT waited for", "creates/s, COMMIT in flight",
                                    "ratio", "calls per batch", "batches overlapped"], rows)])


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    raise SystemExit(main(sys.argv[1:]))
