"""`curvine-py report [--json] [--watch [SECONDS]]`: the cluster as the master reports it. A rich
table of the workers (capacity bar, health, last heartbeat, objects, blocks, evictions, hit rate,
disk reserve, lm:// and /metrics ports), the master's own /metrics and status page ports, the
mounts alive (node, mountpoint, /metrics port, last heartbeat), the replication state
(under-replicated and lost blocks, repairs) and the quotas.
`--json`: the master's ClusterReport as JSON (camelCase names, integers as numbers). `--watch`:
the same again every SECONDS (2), in place on a terminal (rich Live), one snapshot after another
in a pipe (one JSON document per line with --json); Ctrl-C ends it (exit 0). On a terminal too
narrow for one row per worker, the worker columns continue in further tables, each row led by
its worker id.

Hit rate: of the KV lookups each worker answered since it started (the hits and misses its
heartbeat carries); "-" when it has answered none, never a made-up number.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, Self, TypeVar

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from curvine_py.cli.common import add_client_options, client_from, human_bytes, run_tool
from curvine_py.client import CurvineClient
from curvine_py.core.cluster import ClusterReport, WorkerInfo
from curvine_py.rpc.convert import report_as_dict

DEFAULT_WATCH_S = 2.0
BAR_WIDTH = 20
PIPE_WIDTH = 240     # a pipe has no width: wide enough that no row wraps for a script reading it


def bar(used: int, total: int, width: int = BAR_WIDTH) -> Text:
    """`[#######.............]  37%`, red from 90% (the default high watermark), yellow from 75%."""
    share = used / total if total else 0.0
    filled = min(width, round(share * width))
    style = "red" if share >= 0.9 else "yellow" if share >= 0.75 else "green"
    text = Text("[")
    text.append("#" * filled, style=style)
    text.append("." * (width - filled), style="dim")
    text.append(f"] {share:4.0%}")
    return text


def _age(last_heartbeat_ms: int, now_ms: float) -> str:
    return f"{(now_ms - last_heartbeat_ms) / 1000:.1f}s ago" if last_heartbeat_ms else "never"


def hit_rate(hits: int, misses: int) -> str:
    lookups = hits + misses
    return f"{hits / lookups:.1%} of {lookups}" if lookups else "-"


def _health(live: bool) -> Text:
    return Text("live", style="green") if live else Text("LOST", style="bold red")


def _reserve(w: WorkerInfo) -> str:
    if not w.live:
        return ""
    return f"{w.free_space_ratio:.0%} = {human_bytes(w.reserve_bytes)} (free {human_bytes(w.fs_free_bytes)})"


Cell = Callable[[WorkerInfo, float], "str | Text"]

# The worker columns in their order: (header, justify, cell). Health and node come first: what an
# operator looks for, never squeezed out.
WORKER_COLUMNS: tuple[tuple[str, str, Cell], ...] = (
    ("health", "left", lambda w, _: _health(w.live)),
    ("node", "left", lambda w, _: w.node),
    ("address", "left", lambda w, _: f"{w.host}:{w.port}"),
    ("capacity", "left", lambda w, _: bar(w.used, w.capacity)),
    ("used / capacity", "right", lambda w, _: f"{human_bytes(w.used)} / {human_bytes(w.capacity)}"),
    ("heartbeat", "right", lambda w, now_ms: _age(w.last_heartbeat_ms, now_ms)),
    ("objects", "right", lambda w, _: str(w.objects)),
    ("blocks", "right", lambda w, _: str(w.blocks)),
    ("evictions", "right", lambda w, _: str(w.evictions)),
    ("hit rate", "right", lambda w, _: hit_rate(w.hits, w.misses)),
    ("disk reserve", "right", lambda w, _: _reserve(w)),
    ("lm://", "right", lambda w, _: str(w.lm_port or "off")),
    ("metrics", "right", lambda w, _: str(w.metrics_port or "off")),
)
_CELL_OVERHEAD = 3   # a column's padding (1 + 1) and its border (1); a table adds one more border


def _cell_width(value: str | Text) -> int:
    return value.cell_len if isinstance(value, Text) else Text(value).cell_len


def workers_tables(report: ClusterReport, now_ms: float, width: int | None = None) -> list[Table]:
    """The workers, each row led by its id: one table with every column when it fits in `width`
    console columns (None: any width), else the columns spread in their order over as many
    tables as it takes, so that none is squeezed (rich would shrink health and node to nothing)."""
    rows = [(w.worker_id, [cell(w, now_ms) for _, _, cell in WORKER_COLUMNS]) for w in report.workers]
    widths = [max([len(name)] + [_cell_width(cells[i]) for _, cells in rows])
              for i, (name, _, _) in enumerate(WORKER_COLUMNS)]
    id_width = max([len("worker")] + [len(worker_id) for worker_id, _ in rows])
    groups: list[list[int]] = [[]]
    used = 1 + id_width + _CELL_OVERHEAD
    for index, column_width in enumerate(widths):
        if width is not None and groups[-1] and used + column_width + _CELL_OVERHEAD > width:
            groups.append([])
            used = 1 + id_width + _CELL_OVERHEAD
        groups[-1].append(index)
        used += column_width + _CELL_OVERHEAD
    tables = []
    for number, group in enumerate(groups):
        title = "workers" if number == 0 else "workers (continued)"
        table = Table(title=title, title_justify="left", expand=False)
        table.add_column("worker", no_wrap=True, min_width=id_width)
        for index in group:
            name, justify, _ = WORKER_COLUMNS[index]
            table.add_column(name, justify=justify, no_wrap=True, min_width=widths[index])  # type: ignore[arg-type]
        for worker_id, cells in rows:
            table.add_row(worker_id, *(cells[index] for index in group))
        tables.append(table)
    return tables


def mounts_table(report: ClusterReport, now_ms: float) -> Table:
    table = Table(title=f"mounts {len(report.mounts)}", title_justify="left")
    for name, justify in (("node", "left"), ("mountpoint", "left"), ("metrics", "right"), ("heartbeat", "right")):
        table.add_column(name, justify=justify, no_wrap=True)   # type: ignore[arg-type]
    for m in report.mounts:
        table.add_row(m.node, m.mountpoint, str(m.metrics_port or "off"), _age(m.last_heartbeat_ms, now_ms))
    return table


def quotas_table(report: ClusterReport) -> Table:
    table = Table(title=f"quotas {len(report.quotas)}", title_justify="left")
    for name in ("path", "bytes", "used / limit", "inodes"):
        table.add_column(name, no_wrap=True)
    for q in report.quotas:
        table.add_row(q.path, bar(q.used_bytes, q.max_bytes) if q.max_bytes else Text("no byte limit"),
                      f"{human_bytes(q.used_bytes)} / {human_bytes(q.max_bytes) if q.max_bytes else 'unlimited'}",
                      f"{q.used_inodes} / {q.max_inodes or 'unlimited'}")
    return table


def render(report: ClusterReport, now_ms: float, width: int | None = None) -> RenderableType:
    """The report for a console `width` columns wide (None: as wide as it takes)."""
    live = sum(1 for w in report.workers if w.live)
    health = "green" if live == len(report.workers) and live else "red"
    head = Text(f"cluster {report.cluster_id}  epoch {report.epoch}  workers ")
    head.append(f"{live} live / {len(report.workers)}", style=health)
    head.append(f"\nmaster metrics {report.metrics_port or 'off'}  status page {report.status_port or 'off'}")
    total = Text("capacity ")
    total.append_text(bar(report.used, report.capacity))
    total.append(f"  used {human_bytes(report.used)} of {human_bytes(report.capacity)}"
                 f" ({report.used} / {report.capacity} bytes), available {human_bytes(report.available)}")
    counts = Text(f"files {report.files}  directories {report.directories}  blocks {report.blocks}  "
                  f"directory leases {report.dir_leases}  mounts {len(report.mounts)}")
    r = report.replication
    replication = Text("replication: ")
    replication.append(f"{r.under_replicated} under-replicated", style="yellow" if r.under_replicated else "")
    replication.append(", ")
    replication.append(f"{r.lost} lost", style="bold red" if r.lost else "")
    replication.append(f", {r.surplus} surplus blocks; repaired {r.repaired_blocks} blocks "
                       f"({human_bytes(r.repaired_bytes)}), {r.repair_failures} failed copies, "
                       f"repair rate {human_bytes(r.repair_rate) + '/s' if r.repair_rate else 'off'}")
    parts: list[RenderableType] = [head, total, counts, *workers_tables(report, now_ms, width)]
    if report.mounts:
        parts.append(mounts_table(report, now_ms))
    parts.append(replication)
    parts += [Text(f"  LOST (no live copy of a block): {path}", style="red") for path in r.lost_files]
    if r.last_error:
        parts.append(Text(f"  last repair error: {r.last_error}", style="red"))
    if report.quotas:
        parts.append(quotas_table(report))
    return Group(*parts)


def report_dict(report: ClusterReport) -> dict[str, Any]:
    """The master's report as `--json` writes it: the wire message's JSON mapping (camelCase
    names, every field present), integers as numbers."""
    return report_as_dict(report)


def as_json(report: ClusterReport, indent: int | None) -> str:
    return json.dumps(report_dict(report), indent=indent)


T = TypeVar("T")


class CtrlC:
    """Ctrl-C for a loop of master calls. Outside a call it interrupts at once (KeyboardInterrupt);
    during one it is noted, the call finishes (bounded by its deadline) and the KeyboardInterrupt
    comes right after it, because an exception raised inside a blocking gRPC call is a known way
    to wedge the channel's close and the process's exit (grpc/grpc#19973). A second Ctrl-C during
    the call interrupts at once, whatever that costs."""

    def __init__(self) -> None:
        self.in_call = False
        self.pending = False
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None

    def __enter__(self) -> Self:
        self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # None: a handler not set from Python; Python's own is the one to put back then.
        signal.signal(signal.SIGINT, signal.default_int_handler if self._previous is None else self._previous)

    def _on_sigint(self, _signum: int, _frame: FrameType | None) -> None:
        if not self.in_call:
            raise KeyboardInterrupt
        self.pending = True
        signal.signal(signal.SIGINT, signal.default_int_handler)   # the second one

    def call(self, fetch: Callable[[], T]) -> T:
        self.in_call = True
        try:
            result = fetch()
        finally:
            self.in_call = False
        if self.pending:
            raise KeyboardInterrupt
        return result


def watch(fetch: Callable[[], ClusterReport], show: Callable[[ClusterReport], None],
          live: Live | None, interval: float) -> None:
    """Fetch and show every `interval` seconds until Ctrl-C (KeyboardInterrupt: see CtrlC)."""
    with CtrlC() as ctrl_c:
        while True:
            report = ctrl_c.call(fetch)
            if live is not None:
                live.update(render(report, time.time() * 1000, live.console.width), refresh=True)
            else:
                show(report)
            time.sleep(interval)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_client_options(p)
    p.add_argument("--json", action="store_true", help="the master's report as JSON")
    p.add_argument("--watch", nargs="?", type=float, const=DEFAULT_WATCH_S, metavar="SECONDS",
                   help=f"refresh every SECONDS ({DEFAULT_WATCH_S:g} when not given) until Ctrl-C")
    return p


def main(argv: list[str]) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.watch is not None and not args.watch > 0:
        p.error("--watch SECONDS must be more than 0")
    console = Console(soft_wrap=False) if sys.stdout.isatty() else Console(width=PIPE_WIDTH, soft_wrap=False)

    def show(report: ClusterReport) -> None:
        if args.json:
            print(as_json(report, None if args.watch else 2), flush=True)
        else:
            console.print(render(report, time.time() * 1000, console.width))
            if args.watch:
                console.print()   # a blank line between snapshots in a pipe

    def body() -> int:
        with client_from(args) as client:
            if args.watch is None:
                show(client.master.report())
                return 0
            return _watch(client, show, console, args.watch, terminal=sys.stdout.isatty() and not args.json)

    return run_tool("report", body)


def _watch(client: CurvineClient, show: Callable[[ClusterReport], None], console: Console,
           interval: float, terminal: bool) -> int:
    try:
        if terminal:
            with Live(console=console, auto_refresh=False, transient=False) as live:
                watch(client.master.report, show, live, interval)
        else:
            watch(client.master.report, show, None, interval)
    except KeyboardInterrupt:
        pass
    return 0
