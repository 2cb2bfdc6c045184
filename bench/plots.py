"""PNG plots of the benchmark results (matplotlib, Agg: no display needed), written beside each
JSON as `bench/results/<name>-<what>.png`, and the "Plots" section of docs/benchmarks.md that shows
them.

    .venv/bin/python -m bench.plots            # every bench/results/<name>.json that has a plotter
    .venv/bin/python -m bench.plots kv meta    # some of them

`common.publish` calls `render` after it wrote a result, so every `curvine-py bench NAME` run
leaves its plots next to its JSON (a `--quick` run writes `<name>.quick-<what>.png`, git-ignored).

Every plot draws the subject against every baseline the run measured, from the medians the JSON
holds; where the JSON keeps per-repeat samples the bars span their min..max, so a reader sees the
spread of the shared machine and not only the median. Figures are built with `Figure` (no pyplot
state), so plotting never touches a global figure registry.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

from matplotlib.axes import Axes  # after the backend is chosen
from matplotlib.figure import Figure

from bench.common import DOC, RESULTS, median, update_doc

Plot = tuple[str, Figure]          # (what, figure): written as <stem>-<what>.png
Plotter = Callable[[dict[str, Any]], list[Plot]]
DPI = 110
# PNG metadata without the matplotlib version: regenerating identical data gives identical files.
PNG_METADATA = {"Software": None}


def _figure(panels: int, width: float = 6.0, height: float = 4.2) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(width * panels, height), dpi=DPI, layout="constrained")
    axes = [fig.add_subplot(1, panels, i + 1) for i in range(panels)]
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def _spread(samples: Sequence[float] | None, median: float) -> tuple[float, float]:
    """(below, above) the median for an error bar over the per-repeat samples (0, 0 without them)."""
    if not samples:
        return 0.0, 0.0
    return max(0.0, median - min(samples)), max(0.0, max(samples) - median)


def _line(ax: Axes, xs: Sequence[float], medians: Sequence[float],
          samples: Sequence[Sequence[float] | None], label: str, **style: Any) -> float:
    """Draws one series with its min..max bars; returns the highest point drawn (a bar's top), for
    a y limit that shows every series whole."""
    spreads = [_spread(s, m) for s, m in zip(samples, medians, strict=True)]
    ax.errorbar(xs, medians, yerr=([lo for lo, _ in spreads], [hi for _, hi in spreads]), label=label,
                marker="o", capsize=3, **style)
    return max((m + hi for m, (_, hi) in zip(medians, spreads, strict=True)), default=0.0)


LEGEND_WIDTH = 46   # characters per legend line: a long baseline name wraps, never cut


def _legend_label(text: str) -> str:
    return textwrap.fill(text, LEGEND_WIDTH)


def _bars(ax: Axes, groups: Sequence[str], series: Mapping[str, Sequence[float]],
          spreads: Mapping[str, Sequence[tuple[float, float]]] | None = None) -> None:
    """Grouped bars: one group per label in `groups`, one bar per series."""
    width = 0.8 / max(1, len(series))
    for index, (label, values) in enumerate(series.items()):
        xs = [g + (index - (len(series) - 1) / 2) * width for g in range(len(groups))]
        err = None
        if spreads and label in spreads:
            err = ([lo for lo, _ in spreads[label]], [hi for _, hi in spreads[label]])
        ax.bar(xs, values, width, label=label, yerr=err, capsize=3 if err else 0)
    ax.set_xticks(range(len(groups)), groups, rotation=20, ha="right")


# -- per benchmark -------------------------------------------------------------------------------

def plot_kv(data: dict[str, Any]) -> list[Plot]:
    rows = sorted(data["results"], key=lambda r: r["size_mib"])
    sizes = [r["size_mib"] for r in rows]
    labels = data.get("parameters", {}).get("baselines", {})
    fig, (get_ax, put_ax) = _figure(2, height=5.4)
    for ax, ops, title in ((get_ax, ("get", "get_local"), "KV get"), (put_ax, ("put",), "KV put")):
        names = {"get": "KV get (TCP)", "get_local": "KV short-circuit get", "put": "KV put (TCP)"}
        for op in ops:
            medians = [r[op]["subject_median"] for r in rows]
            _line(ax, sizes, medians, [r[op].get("subject") for r in rows], names[op], linewidth=2)
        for key in rows[0][ops[0]]["vs"]:
            medians = [r[ops[0]]["vs"][key]["baseline_median"] for r in rows]
            _line(ax, sizes, medians, [r[ops[0]]["vs"][key].get("baseline") for r in rows],
                  _legend_label(str(labels.get(key, f"raw pair ({key})")).split(" (")[0]), linestyle="--")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_xlabel("object size (MiB)")
        ax.set_ylabel("GB/s (1e9 bytes/s), median, bars min..max")
        ax.set_title(f"{title}: throughput by object size")
        ax.set_ylim(bottom=0)
        # Below the panel, outside the data: every entry whole, none over a series.
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    return [("throughput", fig)]


LMCACHE_WAYS = ("raw", "native", "native_local", "lm_curvine", "fs_curvine", "lm_stock", "redis")
LMCACHE_NAMES = {"raw": "raw socket pair", "native": "native plugin", "native_local": "native, local",
                 "lm_curvine": "lm:// (curvine)", "fs_curvine": "fs:// (mount)",
                 "lm_stock": "lm:// (stock server)", "redis": "redis"}


def _lmcache_rate(entry: Any, op: str) -> float:
    value = entry[op]
    return float(value["gbps"] if isinstance(value, dict) else value)


def _lmcache_spread(run: dict[str, Any], way: str, op: str, median: float) -> tuple[float, float]:
    """min..max over the repeats, from the per-repeat seconds of one sample of bytes_per_sample."""
    repeats = run.get("raw_samples") if way == "raw" else run.get("samples", {}).get(way)
    nbytes = run.get("bytes_per_sample", 0)
    rates = [nbytes / s[f"{op}_s"] / 1e9 for s in repeats or () if s.get(f"{op}_s")]
    return _spread(rates, median)


def plot_lmcache(data: dict[str, Any]) -> list[Plot]:
    networks = [n for n in ("loopback", "veth") if n in data and "summary" in data[n]]
    fig, axes = _figure(len(networks))
    for ax, network in zip(axes, networks, strict=True):
        run = data[network]
        summary = run["summary"]
        ways = [w for w in LMCACHE_WAYS if w in summary]
        rates = {op: [_lmcache_rate(summary[w], op) for w in ways] for op in ("get", "put")}
        _bars(ax, [LMCACHE_NAMES[w] for w in ways], rates,
              {op: [_lmcache_spread(run, w, op, r) for w, r in zip(ways, rates[op], strict=True)]
               for op in rates})
        chunk = data[network].get("chunk_bytes", 0) / (1 << 20)
        ax.set_title(f"LMCache ways, {network}" + (f", {chunk:g} MiB chunks" if chunk else ""))
        ax.set_ylabel("GB/s (1e9 bytes/s), median, bars min..max")
        ax.legend(fontsize=8)
    plots = [("ways", fig)]
    mp = data.get("loopback", {}).get("mp_l2")
    if mp:
        fig, (ax,) = _figure(1)
        adapters = list(mp)
        _bars(ax, adapters, {op: [mp[a][op]["gbps"] for a in adapters] for op in ("Store", "Load")})
        ax.set_title("LMCache multiprocess L2 adapters, loopback")
        ax.set_ylabel("GB/s (1e9 bytes/s)")
        ax.legend(fontsize=8)
        plots.append(("mp-l2", fig))
    return plots


META_OPS = ("create", "lookup", "stat", "rename", "delete")


def plot_meta(data: dict[str, Any]) -> list[Plot]:
    """One row per engine the run measured (SQLite's `results`, PostgreSQL's `postgresql`), one
    panel per client concurrency, on one y scale: the rows compare at a glance."""
    engines = [(r[0].get("engine", "sqlite"), r) for r in (data["results"], data.get("postgresql") or []) if r]
    threads = sorted(engines[0][1][0]["concurrency"], key=int)
    fig = Figure(figsize=(6.0 * len(threads), 4.2 * len(engines)), dpi=DPI, layout="constrained")
    axes: list[Axes] = []
    top = 0.0
    for row, (engine, results) in enumerate(engines):
        rows = sorted(results, key=lambda r: r["files"])
        files = [r["files"] for r in rows]
        for col, t in enumerate(threads):
            ax = fig.add_subplot(len(engines), len(threads), row * len(threads) + col + 1,
                                 sharey=axes[0] if axes else None)
            axes.append(ax)
            ax.grid(True, alpha=0.3)
            for op in META_OPS:
                runs = [r["concurrency"][t][op] for r in rows]
                top = max(top, _line(ax, files, [x["subject_median"] for x in runs],
                                     [x.get("subject") for x in runs], op))
            # Each op's floor was measured just before it: one line through their medians, bars over all.
            floors = [[r["concurrency"][t][op] for op in META_OPS] for r in rows]
            top = max(top, _line(ax, files, [median(x["baseline_median"] for x in f) for f in floors],
                                 [[v for x in f for v in x.get("baseline", ())] for f in floors],
                                 "RPC floor (GetMembership)", linestyle="--", color="black"))
            ax.set_xscale("log")
            ax.set_xticks(files, [f"{f:,}" for f in files])
            ax.set_xlabel("existing files")
            ax.set_ylabel("ops/s, median, bars min..max")
            name = "PostgreSQL" if engine == "postgresql" else "SQLite"
            ax.set_title(f"{name}: master metadata ops/s by file count, {t} client thread{'s' if t != '1' else ''}")
            ax.legend(fontsize=8, ncol=2, loc="upper right")
    # One scale for every panel, set once all are drawn: the shared axis took its limits from the
    # first panels' data and cut the 8-thread series off at ~1,280 ops/s. The headroom above the
    # highest bar holds the legend.
    for ax in axes:
        ax.set_ylim(0, top * 1.35 if top else 1.0)
    return [("ops", fig)]


def plot_fuse(data: dict[str, Any]) -> list[Plot]:
    r = data["results"]
    fig, (seq, rand, meta) = _figure(3, width=5.0)

    def paired(ax: Axes, keys: Sequence[str], names: Sequence[str]) -> None:
        present = [(k, n) for k, n in zip(keys, names, strict=True) if k in r and "baseline_median" in r[k]]
        subject = [r[k]["subject_median"] for k, _ in present]
        baseline = [r[k]["baseline_median"] for k, _ in present]
        _bars(ax, [n for _, n in present], {"FUSE mount": subject, "client library": baseline}, {
            "FUSE mount": [_spread(r[k].get("subject"), v) for (k, _), v in zip(present, subject, strict=True)],
            "client library": [_spread(r[k].get("baseline"), v)
                               for (k, _), v in zip(present, baseline, strict=True)]})
        ax.legend(fontsize=8)

    paired(seq, ("seq_write_1m", "seq_read_1m"), ("write 1 MiB", "read 1 MiB"))
    seq.set_ylabel("GB/s (1e9 bytes/s)")
    seq.set_title("sequential, mount vs library")
    paired(rand, ("rand_read_4k_buffered", "rand_read_4k_direct"), ("buffered", "O_DIRECT"))
    rand.set_ylabel("reads/s")
    rand.set_title("4 KiB random reads")
    threads = sorted({int(k.rsplit("_t", 1)[1]) for k in r if k.startswith("create_t")})
    keys = [f"{op}_t{t}" for t in threads for op in ("create", "stat", "unlink")]
    paired(meta, keys, [k.replace("_t", ", ") + "t" for k in keys])
    meta.set_ylabel("ops/s")
    meta.set_title("metadata (threads)")
    return [("throughput", fig)]


def plot_placement(data: dict[str, Any]) -> list[Plot]:
    rows = data["results"]
    fig, (balance, movement, lookup) = _figure(3, width=5.0)
    for weights, style in (("equal", "-"), ("mixed", ":")):
        part = sorted((x for x in rows if x["weights"] == weights), key=lambda x: x["nodes"])
        nodes = [x["nodes"] for x in part]
        balance.plot(nodes, [x["hrw"]["balance"] for x in part], "o" + style, label=f"HRW, {weights}")
        balance.plot(nodes, [x["ring"]["balance"] for x in part], "s" + style, label=f"100-vnode ring, {weights}")
        balance.plot(nodes, [x["random_floor_balance"] for x in part], "k" + style, alpha=0.6,
                     label=f"random floor, {weights}")
        if weights == "equal":
            for algo, marker in (("hrw", "o"), ("ring", "s")):
                for event, fill in (("join", "-"), ("leave", "--")):
                    movement.plot(nodes, [x[algo][event]["moved_over_ideal"] for x in part], marker + fill,
                                  label=f"{'HRW' if algo == 'hrw' else 'ring'} {event}")
            lookup.plot(nodes, [x["lookup_us_per_key"]["hrw"] for x in part], "o-", label="HRW owners(key)")
            lookup.plot(nodes, [x["lookup_us_per_key"]["ring"] for x in part], "s-", label="ring lookup")
    for ax in (balance, movement, lookup):
        ax.set_xscale("log")
        ax.set_xlabel("workers")
        ax.legend(fontsize=7)
    balance.set_ylabel("max load / ideal (1.00 = perfect)")
    balance.set_title("balance")
    movement.axhline(1.0, color="black", linewidth=0.8)
    movement.set_ylabel("keys moved / ideal share")
    movement.set_title("movement on +1 / -1 worker (equal weights)")
    lookup.set_yscale("log")
    lookup.set_ylabel("microseconds per lookup")
    lookup.set_title("lookup cost")
    return [("balance", fig)]


def plot_failover(data: dict[str, Any]) -> list[Plot]:
    fig, (ax,) = _figure(1)
    cases = {"standby takes over": data["standby_takeover_s"], "restart by hand": data["restart_by_hand_s"]}
    for key, label in (("standby_after_sigstop_s", "leader SIGSTOPped"), ("postgres_restart_s", "PostgreSQL restart")):
        if key in data:
            cases[label] = data[key]
    medians = [c["median"] for c in cases.values()]
    _bars(ax, list(cases), {"seconds": medians},
          {"seconds": [_spread(c["samples"], c["median"]) for c in cases.values()]})
    ax.axhline(data["floor_s"], linestyle="--", color="black", label="standby's lock retry period")
    ax.set_ylabel("event -> first create, s (median, bars min..max)")
    ax.set_title("master failover on PostgreSQL")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return [("takeover", fig)]


def plot_lmcache_same_tcp(data: dict[str, Any]) -> list[Plot]:
    """Part A: every path of each congestion control (GB/s); part B: the fs:// readers, cold and
    warm, against the native plugin's batched get of the same repeats."""
    summary = data["summary"]
    runs = summary["same_tcp"]
    fs = summary.get("fs")
    fig, axes = _figure(len(runs) + (1 if fs else 0), width=5.5)
    for ax, (cc, row) in zip(axes, runs.items(), strict=False):
        paths = row["paths"]
        ax.bar(range(len(paths)), [p["gbps"] for p in paths.values()])
        ax.set_xticks(range(len(paths)), list(paths), rotation=30, ha="right", fontsize=7)
        ax.set_ylabel("GB/s (1e9 bytes/s)")
        ax.set_title(f"servers with {cc}: 8 x 32 MiB gets")
    if fs:
        ax = axes[-1]
        readers = fs["readers"]
        names = [SAME_TCP_READERS.get(n, n) for n in readers]
        _bars(ax, names, {"cold": [r["cold_gbps"] for r in readers.values()],
                          "warm": [r["warm_gbps"] for r in readers.values()]})
        ax.axhline(fs["native_batched_gbps"], color="black", linestyle="--", label="native plugin, batched get")
        ax.set_ylabel("GB/s (1e9 bytes/s)")
        ax.set_title("fs:// over the mount vs the native get")
        ax.legend(fontsize=8)
    return [("gets", fig)]


SAME_TCP_READERS = {"fs_read": "reader on another node (TCP)", "fs_local": "reader on the owner's node"}


def plot_fuse_cold(data: dict[str, Any]) -> list[Plot]:
    """Per read pattern: the mount's CPU per MiB and GB/s of each checkout, bars spanning the repeats."""
    samples = data["samples"]
    fig, axes = _figure(2, width=5.5)
    for ax, metric, label in zip(axes, ("mount_ms", "gbps"), ("mount CPU ms per MiB", "GB/s (1e9 bytes/s)"),
                                 strict=True):
        checkouts = list(next(iter(samples.values())))
        series: dict[str, list[float]] = {}
        spreads: dict[str, list[tuple[float, float]]] = {}
        for name in checkouts:
            values = [[s[metric] for s in samples[pattern][name]] for pattern in samples]
            series[name] = [median(v) for v in values]
            spreads[name] = [_spread(v, median(v)) for v in values]
        _bars(ax, list(samples), series, spreads)
        ax.set_ylabel(label)
        ax.set_title(f"cold reads through the mount: {label.split(' (')[0]}")
        ax.legend(fontsize=8)
    return [("cpu", fig)]


PLOTTERS: dict[str, Plotter] = {"kv": plot_kv, "lmcache": plot_lmcache, "meta": plot_meta,
                                "fuse": plot_fuse, "placement": plot_placement, "failover": plot_failover,
                                "lmcache-same-tcp": plot_lmcache_same_tcp, "fuse-cold": plot_fuse_cold}
CAPTIONS = {
    "kv": "KV get and put throughput by object size against both raw socket pairs of the same run",
    "lmcache": "LMCache's ways (get and put) against the raw pair, redis and LMCache's own lm:// server",
    "meta": "Master metadata ops/s by file count against the RPC floor, SQLite and PostgreSQL",
    "fuse": "The FUSE mount against the client library",
    "placement": "Weighted rendezvous against a 100-vnode ring",
    "failover": "Standby master takeover against restarting the one master by hand",
    "lmcache-same-tcp": "Native plugin and stock lm:// server with the same TCP settings; fs:// readers cold and warm",
    "fuse-cold": "Cold reads through the mount: its CPU per MiB and GB/s, checkouts side by side",
}


def render(name: str, data: dict[str, Any], out_dir: pathlib.Path = RESULTS, *,
           quick: bool = False) -> list[pathlib.Path]:
    """Writes the plots of benchmark `name`; [] when it has no plotter. A result the plotter cannot
    read raises (KeyError/TypeError): a silently missing plot would go unnoticed."""
    plotter = PLOTTERS.get(name)
    if plotter is None:
        return []
    stem = f"{name}.quick" if quick else name
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for what, fig in plotter(data):
        assert what in OUTPUTS[name], f"{name} drew {what!r}, not listed in OUTPUTS"
        path = out_dir / f"{stem}-{what}.png"
        tmp = path.with_name(path.name + ".tmp")
        fig.savefig(tmp, format="png", metadata=PNG_METADATA)
        tmp.replace(path)
        written.append(path)
    return written


# The PNGs each plotter draws, in the order the doc shows them.
OUTPUTS = {"kv": ("throughput",), "lmcache": ("ways", "mp-l2"), "meta": ("ops",), "fuse": ("throughput",),
           "placement": ("balance",), "failover": ("takeover",), "lmcache-same-tcp": ("gets",), "fuse-cold": ("cpu",)}


def _ran(results: pathlib.Path, name: str) -> str:
    try:
        info = json.loads((results / f"{name}.json").read_text())["machine"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    # The commit stays in the JSON: the doc shows current figures, not history.
    return f" (run of {info.get('date', '?')})"


def doc_section(results: pathlib.Path = RESULTS, doc: pathlib.Path = DOC) -> str:
    """The doc's plots section: the full-run PNGs present in `results`, with the run they show."""
    lines = ["## Plots", "",
             ("Drawn by `bench/plots.py` (matplotlib) from the JSON in `bench/results/`: every benchmark "
              "run redraws its own, and `.venv/bin/python -m bench.plots` redraws them all from the stored "
              "results without running anything. Each says which run it shows.")]
    for name, outputs in OUTPUTS.items():
        files = [results / f"{name}-{what}.png" for what in outputs]
        files = [f for f in files if f.exists()]
        if not files:
            continue
        lines += ["", f"**{name}**: {CAPTIONS.get(name, name)}{_ran(results, name)}.", ""]
        for path in files:
            rel = pathlib.Path("..") / path.resolve().relative_to(doc.resolve().parent.parent)
            lines.append(f"![{name} {path.stem.split('-', 1)[-1]}]({rel.as_posix()})")
    return "\n".join(lines)


def update_plots_doc(results: pathlib.Path = RESULTS, doc: pathlib.Path = DOC) -> None:
    """Rewrites the doc's plots section (between `<!-- bench:plots -->` markers)."""
    update_doc("plots", doc_section(results, doc), doc)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.plots", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help=f"benchmarks to plot (default: all of {', '.join(PLOTTERS)})")
    p.add_argument("--results", type=pathlib.Path, default=RESULTS, help="directory of the JSON results")
    p.add_argument("--no-doc", action="store_true", help="do not rewrite the plots section of the doc")
    args = p.parse_args(argv)
    unknown = [n for n in args.names if n not in PLOTTERS]
    if unknown:
        p.error(f"no plotter for {', '.join(unknown)} (known: {', '.join(PLOTTERS)})")
    status = 0
    for name in args.names or list(PLOTTERS):
        source = args.results / f"{name}.json"
        if not source.exists():
            print(f"{name}: no {source}", file=sys.stderr)
            status = status or (1 if args.names else 0)
            continue
        for path in render(name, json.loads(source.read_text()), args.results):
            print(f"wrote {path}")
    if not args.no_doc and args.results == RESULTS:
        update_plots_doc()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
