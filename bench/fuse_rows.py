"""Two rows of bench fuse, fast and focused: 1-thread stat (kernel caches expired) and unlink,
through the mount and through the library, with the CPU the mount, the master and this process
spend per operation (from /proc: user+system, system alone, and the mount's by thread name), for
comparing checkouts (before/after a change).

    PYTHONPATH=CHECKOUT .venv/bin/python bench/fuse_rows.py one OUT.json [--files N] [--repeats R] [--seq-mib M]
    .venv/bin/python bench/fuse_rows.py ab OUT.json NAME=CHECKOUT NAME=CHECKOUT [--rounds K] ...
    .venv/bin/python bench/fuse_rows.py show OUT.json

`one` measures the checkout on PYTHONPATH with its own cluster, mount and client (only the API
both sides of the restructuring share: Cluster, Mount, client.master.lookup/unlink); `--seq-mib`
first writes and reads a file through the mount, as bench/fuse_before_after.py does. `ab` runs
`one` for each checkout in turn, K rounds, the order alternating, and prints per side the median
over runs. The row `idle` is one second of nothing: the background CPU, which a slow row's per-op
CPU includes (the master's heartbeats and maintenance, ~20 ms/s). With STATGAP_PROF=DIR set, each
row's name is written to DIR/phase while it runs, for a sampler or RPC counter in the processes.

On a loaded machine the rates spread 3-5x between runs: compare CPU per operation, which spreads
far less.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")
ROWS = ("mnt_stat", "mnt_unlink", "lib_stat", "lib_unlink", "idle")   # idle: CPU per second of nothing


def tree(pid: int) -> list[int]:
    """pid and its descendants (the mount may run under a wrapper)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pids: list[int]) -> tuple[float, float]:
    """(user, system) seconds of these processes."""
    user = system = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user += int(fields[11])
            system += int(fields[12])
        except OSError:
            pass
    return user / TICK, system / TICK


def phase(name: str) -> None:
    """Marks the phase for an external sampler (STATGAP_PROF: a directory it watches)."""
    where = os.environ.get("STATGAP_PROF")
    if where:
        pathlib.Path(where, "phase").write_text(name)


def threads_cpu(pids: list[int]) -> dict[str, float]:
    """CPU seconds by thread name (comm) over these processes."""
    out: dict[str, float] = {}
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/comm") as f:
                    comm = f.read().strip()
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[comm] = out.get(comm, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return out


def timed(name: str, action: Callable[[Any], object], items: list[Any],
          procs: dict[str, list[int]]) -> dict[str, float]:
    phase(name)
    before = {k: cpu_seconds(v) for k, v in procs.items()}
    by_thread = threads_cpu(procs["mount"]) if "mount" in procs else {}
    started = time.perf_counter()
    for item in items:
        action(item)
    elapsed = time.perf_counter() - started
    phase("")
    out = {"rate": len(items) / elapsed}
    for k, v in procs.items():
        user, system = cpu_seconds(v)
        out[f"{k}_cpu_us"] = (user + system - sum(before[k])) / len(items) * 1e6
        out[f"{k}_sys_us"] = (system - before[k][1]) / len(items) * 1e6
    if by_thread:
        after = threads_cpu(procs["mount"])
        for comm, seconds in after.items():
            used = (seconds - by_thread.get(comm, 0.0)) / len(items) * 1e6
            if used > 0:
                out[f"mount thread {comm} us"] = used
    return out


def sequential(path: pathlib.Path, mib: int) -> None:
    block = os.urandom(1 << 20)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        for _ in range(mib):
            os.write(fd, block)
    finally:
        os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while os.read(fd, 1 << 20):
            pass
    finally:
        os.close(fd)


def one(out: str, files: int, repeats: int, seq_mib: int) -> None:
    from tests.fuse.mounts import Mount
    from tests.harness import Cluster
    results: dict[str, list[dict[str, float]]] = {row: [] for row in ROWS}
    with tempfile.TemporaryDirectory(prefix="bench-fuse-rows-") as tmp:
        root = pathlib.Path(tmp)
        node = "bench-client"
        with Cluster(root / "cluster", workers=1, node_names=["bench-node"]) as cluster:
            client = cluster.client(node=node)
            with Mount(cluster.master_address, root / "mnt", args=["--node", node],
                       env={"CURVINE_FUSE_FAIL_FAST": "0"}) as mount:
                assert cluster.master is not None and mount.process is not None
                procs = {"mount": tree(mount.process.process.pid), "master": tree(cluster.master.process.pid),
                         "bench": [os.getpid()]}
                if seq_mib:     # as bench/fuse_before_after.py: a sequential write and read first
                    sequential(mount.path / "seq", seq_mib)
                for r in range(repeats):
                    top = mount.path / f"m{r}"
                    top.mkdir()
                    paths = [top / f"f{i:06d}" for i in range(files)]
                    for p in paths:
                        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
                    time.sleep(1.2)             # the kernel's entries and attributes expire
                    results["mnt_stat"].append(timed("mnt_stat", os.stat, paths, procs))
                    results["mnt_unlink"].append(timed("mnt_unlink", os.unlink, paths, procs))
                    parent = os.stat(mount.path / f"m{r}").st_ino
                    names = [f"g{i:06d}" for i in range(files)]
                    for n in names:
                        os.close(os.open(top / n, os.O_CREAT | os.O_WRONLY, 0o644))
                    items = [(parent, n) for n in names]
                    results["lib_stat"].append(timed("lib_stat", lambda it: client.master.lookup(*it), items, procs))
                    results["lib_unlink"].append(timed("lib_unlink", lambda it: client.master.unlink(*it), items, procs))
                    results["idle"].append(timed("idle", lambda _: time.sleep(1.0), [None, None], procs))
    pathlib.Path(out).write_text(json.dumps(results) + "\n")


def summarise(runs: list[dict[str, list[dict[str, float]]]]) -> dict[str, dict[str, float]]:
    out = {}
    for row in ROWS:
        samples = [s for run in runs for s in run[row]]
        keys = sorted({k for s in samples for k in s})     # a thread that used no CPU in a run is absent
        out[row] = {k: statistics.median(s.get(k, 0.0) for s in samples) for k in keys}
    return out


def ab(out: str, sides: list[str], rounds: int, files: int, repeats: int, seq_mib: int) -> None:
    named = [s.split("=", 1) for s in sides]
    runs: dict[str, list[Any]] = {name: [] for name, _ in named}
    python = sys.executable
    for r in range(rounds):
        order = named if r % 2 == 0 else named[::-1]
        for name, checkout in order:
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                subprocess.run([python, os.path.abspath(__file__), "one", f.name, "--files", str(files),
                                "--repeats", str(repeats), "--seq-mib", str(seq_mib)], check=True, cwd=checkout,
                               env={**os.environ, "PYTHONPATH": checkout})
                runs[name].append(json.loads(pathlib.Path(f.name).read_text()))
        report(runs, r + 1)
        pathlib.Path(out).write_text(json.dumps({"files": files, "repeats": repeats, "runs": runs}) + "\n")


def report(runs: dict[str, list[Any]], rounds: int) -> None:
    print(f"after {rounds} round(s), load {os.getloadavg()[0]:.1f}")
    for name, side in runs.items():
        s = summarise(side)
        print(f"  {name:>12}: " + "  ".join(
            f"{row} {s[row]['rate']:,.0f}/s (mnt {s[row]['mount_cpu_us']:.0f} us"
            f"{_sys(s[row], 'mount')}, mst {s[row]['master_cpu_us']:.0f} us{_sys(s[row], 'master')})"
            for row in ROWS), flush=True)


def _sys(row: dict[str, float], proc: str) -> str:
    key = f"{proc}_sys_us"
    return f" {row[key]:.0f} sys" if key in row else ""


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["one", "ab", "show"])
    p.add_argument("out")
    p.add_argument("sides", nargs="*")
    p.add_argument("--files", type=int, default=500)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seq-mib", type=int, default=0, help="write and read a file this large first (MiB)")
    a = p.parse_args(argv)
    if a.mode == "one":
        one(a.out, a.files, a.repeats, a.seq_mib)
    elif a.mode == "ab":
        ab(a.out, a.sides, a.rounds, a.files, a.repeats, a.seq_mib)
    else:
        doc = json.loads(pathlib.Path(a.out).read_text())
        report(doc["runs"], len(next(iter(doc["runs"].values()))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
