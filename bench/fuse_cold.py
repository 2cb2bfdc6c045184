"""`python -m bench.fuse_cold`: where a cold read through the mount spends its CPU, per MiB, with
checkouts of the mount side by side in one run.

One master and one worker from this checkout; a writer mount fills the files; one reader mount per
`--checkout NAME=DIR[,KEY=VALUE...]` (default: this checkout only), each started from DIR's code,
with the KEY=VALUE pairs in its environment (CURVINE_* settings: variants of one checkout) and a
node name of its own (not the worker's: every read goes over TCP; `--local` names the worker's
node instead: short-circuit reads of blocks whose owner runs there). Each repeat reads cold (pages
evicted first) through every reader mount in turn, so the checkouts share the machine's drift:
- sequential: one file in 1 MiB reads into a page-aligned buffer;
- fs:// pattern: `--files` files at once, each as LMCache's fs connector reads it (a 28-byte
  metadata read, then readinto a reused buffer).
For every read: GB/s; CPU ms per MiB of the reader mount, of the worker and of this (reading)
process, summed over their threads (/proc/PID/task/*/schedstat; getrusage here), which the load
of a shared machine disturbs less than wall time; the reader mount's FUSE reads and the worker's
READ_BLOCKs (their /metrics). Medians over the repeats; the ratio column is the median of the
per-repeat ratios to the first checkout. Every read is checked for its full length: a short one
(a reader that saw EOF early) is counted in the table, not hidden.
"""
from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import common
from curvine_py.client.buffers import aligned
from tests.fuse.mounts import Mount
from tests.harness import Cluster

NAME = "fuse-cold"
MiB = 1 << 20
FS_HEADER, FS_CHUNK = 28, 32 * MiB      # LMCache's fs connector: metadata, then one KV chunk
READS = 'curvine_mount_requests_total{op="read"}'
BLOCK_READS = 'curvine_operation_duration_seconds_count{op="read_block"}'
PATTERNS = {"seq": "sequential read, 1 MiB reads", "fs": "fs:// pattern, files at once"}
METRICS = ("gbps", "mount_ms", "worker_ms", "reader_ms", "fuse_reads", "block_reads")


def cpu_seconds(pid: int) -> float:
    """CPU time of a process so far, over its threads (ns resolution); getrusage for this one."""
    if pid == os.getpid():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):    # a thread that just ended
            total += int(pathlib.Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
    return total / 1e9


def counters(address: str) -> dict[str, float]:
    return common.scrape(address, (READS, BLOCK_READS))


class Readers:
    def __init__(self, seq_bytes: int, files: int) -> None:
        self.seq_bytes, self.files = seq_bytes, files
        self.buffer = aligned(MiB)
        self.chunks = [aligned(FS_CHUNK) for _ in range(files)]
        for chunk in self.chunks:
            chunk[:] = bytes(len(chunk))     # touched: LMCache reads into pooled memory

    def names(self, pattern: str) -> list[str]:
        return ["seq"] if pattern == "seq" else [f"fs{i}" for i in range(self.files)]

    def seq(self, root: pathlib.Path) -> int:
        total = 0
        with open(root / "seq", "rb", buffering=0) as fh:
            while n := fh.readinto(self.buffer):
                total += n
        return total

    def fs(self, root: pathlib.Path) -> int:
        def one(i: int) -> int:
            with open(root / f"fs{i}", "rb") as fh:
                head = fh.readinto(bytearray(FS_HEADER))
                return head + (fh.readinto(self.chunks[i]) or 0)
        with ThreadPoolExecutor(self.files) as pool:
            return sum(pool.map(one, range(self.files)))


def measure(read: Callable[[], int], expected: int, mount: Mount, worker_pid: int, worker_metrics: str) -> dict[str, float]:
    assert mount.process is not None
    pids = (mount.process.process.pid, worker_pid, os.getpid())
    before = [cpu_seconds(pid) for pid in pids], counters(mount.process.field("metrics")), counters(worker_metrics)
    started = time.perf_counter()
    total = read()
    elapsed = time.perf_counter() - started
    after = [cpu_seconds(pid) for pid in pids], counters(mount.process.field("metrics")), counters(worker_metrics)
    mib = max(total, 1) / MiB
    if total != expected:      # counted, not raised: a checkout under test may have the bug
        print(f"{mount.path}: read {total} bytes of {expected} (a short read)", file=sys.stderr, flush=True)
    ms = [(b - a) * 1e3 / mib for a, b in zip(before[0], after[0], strict=True)]
    return {"gbps": common.gbps(total, elapsed), "mount_ms": ms[0], "worker_ms": ms[1], "reader_ms": ms[2],
            "fuse_reads": after[1].get(READS, 0.0) - before[1].get(READS, 0.0),
            "block_reads": after[2].get(BLOCK_READS, 0.0) - before[2].get(BLOCK_READS, 0.0),
            "short": float(total != expected)}


def run(root: pathlib.Path, checkouts: dict[str, tuple[pathlib.Path, dict[str, str]]], args: Any) -> dict[str, Any]:
    seq_bytes = args.size_mib * MiB
    readers = Readers(seq_bytes, args.files)
    samples: dict[str, dict[str, list[dict[str, float]]]] = {p: {n: [] for n in checkouts} for p in PATTERNS}
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(Cluster(root / "cluster", workers=1, node_names=["bench-worker"],
                                              worker_args=["--metrics-port", "-1"]))
        cluster.wait_for_live_workers(1)
        writer = stack.enter_context(Mount(cluster.master_address, root / "mnt-writer", args=["--node", "bench-writer"]))
        mounts = {name: stack.enter_context(Mount(
            cluster.master_address, root / f"mnt-{name}", prefix=["env", f"--chdir={tree}"],
            env={"PYTHONPATH": str(tree), **env},
            args=["--node", "bench-worker" if args.local else f"bench-reader-{name}", "--metrics-port", "-1"]))
            for name, (tree, env) in checkouts.items()}
        source = aligned(MiB)
        source[:] = os.urandom(MiB)
        for name, size in [("seq", seq_bytes)] + [(f"fs{i}", FS_HEADER + FS_CHUNK) for i in range(args.files)]:
            with open(writer.path / name, "wb", buffering=0) as fh:
                fh.writelines(source[:min(MiB, size - offset)] for offset in range(0, size, MiB))
        worker = cluster.workers[0]
        assert worker is not None
        expected = {"seq": seq_bytes, "fs": args.files * (FS_HEADER + FS_CHUNK)}
        for repeat in range(args.repeats):
            print(f"repeat {repeat + 1}/{args.repeats}", file=sys.stderr, flush=True)
            for pattern in PATTERNS:
                for name, mount in mounts.items():
                    for file in readers.names(pattern):
                        common.evict(mount.path / file)
                    read = functools.partial(getattr(readers, pattern), mount.path)
                    samples[pattern][name].append(measure(read, expected[pattern], mount, worker.process.pid,
                                                          worker.field("metrics")))
    return samples


def summarize(samples: dict[str, dict[str, list[dict[str, float]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pattern, by_name in samples.items():
        first = next(iter(by_name.values()))
        out[pattern] = {name: {**{m: common.median([s[m] for s in rows]) for m in METRICS},
                               "gbps_ratio": common.median([s["gbps"] / f["gbps"] for s, f in zip(rows, first, strict=True)]),
                               "mount_ms_ratio": common.median([s["mount_ms"] / f["mount_ms"]
                                                                for s, f in zip(rows, first, strict=True)]),
                               "short_reads": sum(s["short"] for s in rows)}
                        for name, rows in by_name.items()}
    return out


def render(payload: dict[str, Any]) -> str:
    params = payload["parameters"]
    where = ("on the worker's node (short-circuit reads)" if params.get("local")
             else "on another node name than the worker's (TCP)")
    lines = ["## Cold reads through the mount: CPU per MiB by process (`python -m bench.fuse_cold`)", "",
             common.machine_line(payload["machine"]), "",
             (f"One worker; reader mounts {where}, one per checkout: "
             f"{', '.join(f'`{n}` ({d})' for n, d in params['checkouts'].items())}. Sequential: a {params['size_mib']} MiB file; "
             f"fs:// pattern: {params['files']} x 32 MiB files at once. Cold (pages evicted first), medians of "
             f"{params['repeats']} repeats, checkouts interleaved in each; ratios are medians of per-repeat ratios to "
             f"`{next(iter(params['checkouts']))}`; CPU is ms per MiB read, over each process's threads."), ""]
    rows = []
    for pattern, by_name in payload["summary"].items():
        for name, s in by_name.items():
            rows.append([PATTERNS[pattern], name, f"{s['gbps']:.2f}", f"{s['gbps_ratio']:.2f}x", f"{s['mount_ms']:.3f}",
                         f"{s['mount_ms_ratio']:.2f}x", f"{s['worker_ms']:.3f}", f"{s['reader_ms']:.3f}",
                         f"{s['fuse_reads']:.0f}", f"{s['block_reads']:.0f}",
                         f"{s['short_reads']:.0f} of {payload['parameters']['repeats']}"])
    lines.append(common.table(["read", "checkout", "GB/s", "GB/s vs first", "mount CPU ms/MiB", "vs first",
                               "worker ms/MiB", "reader ms/MiB", "FUSE reads", "READ_BLOCKs",
                               "repeats with a short read"], rows))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = common.parser(NAME, __doc__.splitlines()[0], repeats=7)
    p.add_argument("--checkout", action="append", default=[], metavar="NAME=DIR[,KEY=VALUE...]",
                   help="a reader mount run from DIR's code, with KEY=VALUE in its environment (repeatable; "
                        "default: this checkout, as 'this')")
    p.add_argument("--local", action="store_true",
                   help="reader mounts on the worker's node (short-circuit reads) instead of another (TCP)")
    p.add_argument("--size-mib", type=int, default=256, help="sequential file size (default 256)")
    p.add_argument("--files", type=int, default=8, help="32 MiB files read at once in the fs:// pattern (default 8)")
    p.add_argument("--dir", default="/var/tmp", help="where data dirs live (default /var/tmp)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.size_mib, args.files = min(args.repeats, 2), min(args.size_mib, 64), min(args.files, 2)
    checkouts: dict[str, tuple[pathlib.Path, dict[str, str]]] = {}
    for spec in args.checkout or [f"this={common.REPO}"]:
        name, sep, rest = spec.partition("=")
        tree, *pairs = rest.split(",")
        env = dict(pair.partition("=")[::2] for pair in pairs)
        if (not sep or not name or not (pathlib.Path(tree) / "curvine_py" / "fuse" / "main.py").is_file()
                or not all(key and value for key, value in env.items())):
            p.error(f"--checkout {spec!r}: want NAME=DIR[,KEY=VALUE...], DIR a curvine-py checkout")
        if name in checkouts:
            p.error(f"--checkout {spec!r}: {name} named twice")
        checkouts[name] = (pathlib.Path(tree).resolve(), env)
    info = common.machine()
    root = pathlib.Path(tempfile.mkdtemp(prefix="curvine-bench-fuse-cold-", dir=args.dir))
    try:
        samples = run(root, checkouts, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    payload = {"benchmark": NAME, "machine": info,
               "parameters": {"checkouts": {n: " ".join([str(d), *(f"{k}={v}" for k, v in e.items())])
                                            for n, (d, e) in checkouts.items()},
                              "local": args.local, "size_mib": args.size_mib,
                              "files": args.files, "repeats": args.repeats, "quick": args.quick},
               "samples": samples, "summary": summarize(samples)}
    common.publish(NAME, args, payload, render(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
