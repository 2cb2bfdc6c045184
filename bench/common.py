"""Shared machinery of the benchmarks: argument parsing, timing with medians over repeats, the
machine description, JSON results (bench/results/<name>.json) and the benchmark's own section of
docs/benchmarks.md.

Why every benchmark interleaves its baseline with its subject: the machine is shared and noisy
(2 cores, other jobs), so absolute numbers drift by tens of percent between minutes. Each repeat
measures the baseline and the subject back to back and the report is the median of those per-repeat
ratios (and the medians of each side), which cancels most of the drift.

docs/benchmarks.md holds one section per benchmark between `<!-- bench:NAME -->` and
`<!-- /bench:NAME -->`; a run replaces only its own section, so benchmarks written by different
people (kv, placement, meta, fuse, lmcache) stay side by side.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from curvine_py.cli.progress import progress_bar

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
DOC = REPO / "docs" / "benchmarks.md"
MiB = 1 << 20

DOC_INTRO = """# Benchmarks

Numbers measured by `curvine-py bench <name>` (sources in `bench/`, raw results in
`bench/results/<name>.json`). Run them from the source checkout:

    .venv/bin/curvine-py bench kv            # KV put/get vs a raw socket pair, short-circuit get
    .venv/bin/curvine-py bench placement     # rendezvous balance and movement vs a 100-vnode ring
    .venv/bin/curvine-py bench meta          # master metadata ops/s at 10k and 1M files
    .venv/bin/curvine-py bench NAME --quick  # a fast smoke run (writes NAME.quick.json, not this page)

**How to read them.** The machine is small and shared (2 cores, other jobs running), so absolute
numbers move by tens of percent from one minute to the next. Every benchmark therefore measures its
baseline *in the same run*, interleaved with the subject (baseline, subject, baseline, subject...),
and reports the **ratio** subject / baseline: the median over >= 5 repeats of the per-repeat ratios.
A ratio of 0.9x for a KV get means "90% of what the best raw Python socket pair moved in the same
minute on the same machine". Absolute GB/s and ops/s are medians too, for orientation only.

Each section below is written by its benchmark and says when and on what machine it ran.
"""


# -- arguments ---------------------------------------------------------------------------------
def parser(name: str, description: str, *, repeats: int = 5) -> argparse.ArgumentParser:
    """An ArgumentParser with the options every benchmark takes."""
    p = argparse.ArgumentParser(prog=f"curvine-py bench {name}", description=description)
    p.add_argument(
        "--repeats",
        type=int,
        default=repeats,
        help=f"repeats per measurement; medians are reported (default {repeats}, >= 5 for the doc)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a fast smoke run: smaller sizes, fewer repeats; writes NAME.quick.json, not the doc",
    )
    p.add_argument("--no-write", action="store_true", help="print only: no JSON, no doc section")
    return p


# -- timing ------------------------------------------------------------------------------------
def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of `fn` takes (perf_counter)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


@dataclass(frozen=True, slots=True)
class Paired:
    """Per-repeat measurements of a subject and its baseline (same unit, higher = better)."""

    subject: tuple[float, ...]
    baseline: tuple[float, ...]

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(s / b for s, b in zip(self.subject, self.baseline, strict=True) if b > 0)

    @property
    def ratio(self) -> float:
        """Median of the per-repeat ratios (drift between repeats cancels)."""
        return median(self.ratios)

    def summary(self) -> dict[str, Any]:
        return {
            "subject_median": median(self.subject),
            "baseline_median": median(self.baseline),
            "ratio_median": self.ratio,
            "ratio_min": min(self.ratios),
            "ratio_max": max(self.ratios),
            "subject": list(self.subject),
            "baseline": list(self.baseline),
        }


def paired(subject: Callable[[], float], baseline: Callable[[], float], repeats: int, *,
           what: str = "repeats") -> Paired:
    """Runs baseline then subject, `repeats` times, alternating which goes first so that neither
    always inherits the other's warm (or cold) caches. On a terminal a bar counts the runs."""
    subjects: list[float] = []
    baselines: list[float] = []
    with progress_bar(what, 2 * repeats, unit="count", transient=True) as bar:
        for index in range(repeats):
            first, second = (subject, baseline) if index % 2 else (baseline, subject)
            for run in (first, second):
                (subjects if run is subject else baselines).append(run())
                bar.advance()
    return Paired(tuple(subjects), tuple(baselines))


# -- machine and output ------------------------------------------------------------------------
# The load average and date when this benchmark process started (this module is imported before
# anything is measured): machine() is called at the start of some benchmarks and at the end of
# others, and a load average read at the end would carry the benchmark's own load.
STARTED_AT = datetime.datetime.now(datetime.UTC)
LOADAVG_AT_START = os.getloadavg()


def machine() -> dict[str, Any]:
    """Where the run happened; `loadavg_at_start` and `date` are the process's start, whenever
    this is called (`loadavg_now` is the load average at the call)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_kb = int(pathlib.Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kb = 0
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kb / (1 << 20), 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": [round(x, 2) for x in LOADAVG_AT_START],
        "loadavg_now": [round(x, 2) for x in os.getloadavg()],
        "commit": _git_commit(),
        "date": STARTED_AT.isoformat(timespec="seconds"),
    }


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_line(info: dict[str, Any]) -> str:
    return (
        f"Ran {info['date']} on {info['cpus']} x {info['cpu']}, {info['memory_gib']} GiB, Linux "
        f"{info['kernel']}, Python {info['python']} (load average at start "
        f"{info['loadavg_at_start'][0]}; the commit measured is in the JSON)."
    )


def write_json(name: str, payload: dict[str, Any], *, quick: bool = False) -> pathlib.Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / (f"{name}.quick.json" if quick else f"{name}.json")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return path


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub markdown table; floats are printed as given (format them before)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
    return "\n".join(lines)


def update_doc(name: str, body: str, doc: pathlib.Path = DOC) -> pathlib.Path:
    """Replaces the section between this benchmark's markers (appends it the first time)."""
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    section = f"{begin}\n{body.strip()}\n{end}"
    text = doc.read_text() if doc.exists() else DOC_INTRO
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _m: section, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    tmp = doc.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(doc)
    return doc


def publish(name: str, args: argparse.Namespace, payload: dict[str, Any], doc_body: str) -> None:
    """Prints the doc section and, unless told not to, writes the JSON and its plots (bench/plots.py)
    (and the doc, for full runs)."""
    print(doc_body)
    if args.no_write:
        return
    path = write_json(name, payload, quick=args.quick)
    print(f"\nwrote {path.relative_to(REPO)}", file=sys.stderr)
    if not args.quick:
        update_doc(name, doc_body)
        print(f"updated {DOC.relative_to(REPO)} (section bench:{name})", file=sys.stderr)
    from bench import plots  # here: plots imports this module
    for png in plots.render(name, payload, path.parent, quick=args.quick):
        print(f"wrote {png.relative_to(REPO)}", file=sys.stderr)
    if not args.quick:
        plots.update_plots_doc(path.parent)


def gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def evict(path: pathlib.Path) -> None:
    """Drops this node's cached pages of the file, so the next read reaches the file system."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def scrape(address: str, names: Iterable[str]) -> dict[str, float]:
    """The samples named `names` (full sample names, labels included) of the /metrics page at
    `address`; absent ones are left out."""
    import urllib.request

    wanted = set(names)
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    values = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name in wanted:
            values[name] = float(value)
    return values


def in_turns(command: Sequence[str], sides: Sequence[tuple[str, str]], rows: Sequence[str], repeats: int,
             parse: Callable[[str], Any], each_repeat: Callable[[dict[str, dict[str, list[Any]]], list[float]], None]
             | None = None) -> tuple[dict[str, dict[str, list[Any]]], list[float]]:
    """Samples of `rows` from one worker per checkout, asked in turns: `command` runs once per
    side (PYTHONPATH and cwd its checkout), prints "ready", then answers each row name it reads on
    stdin with one line (`parse`d). The order of the sides alternates by repeat, so both see the
    same load within a sample's time. Returns samples[side][row] and the 1-minute load average at
    the start and after each repeat (`each_repeat` sees both so far, to write partial results)."""
    workers: dict[str, subprocess.Popen[str]] = {}
    try:
        for name, checkout in sides:
            workers[name] = subprocess.Popen(list(command), cwd=checkout, env={**os.environ, "PYTHONPATH": checkout},
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for worker in workers.values():
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        samples: dict[str, dict[str, list[Any]]] = {name: {row: [] for row in rows} for name, _ in sides}
        loads = [os.getloadavg()[0]]
        for r in range(repeats):
            for row in rows:
                for name, _ in (sides if r % 2 == 0 else sides[::-1]):
                    worker = workers[name]
                    assert worker.stdin is not None and worker.stdout is not None
                    worker.stdin.write(row + "\n")
                    worker.stdin.flush()
                    samples[name][row].append(parse(worker.stdout.readline()))
            loads.append(os.getloadavg()[0])
            if each_repeat is not None:
                each_repeat(samples, loads)
        return samples, loads
    finally:
        for worker in workers.values():
            if worker.stdin is not None:
                worker.stdin.close()
            worker.wait(timeout=120)
