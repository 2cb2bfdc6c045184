"""`python -m bench.lmcache_same_tcp`: the native plugin against LMCache's stock `lm://` server with
the same TCP settings, single gets and batched gets apart; and `fs://` over the mount, cold and warm.

Part A (issue 14, "peers run under the same TCP settings as ours"): the curvine worker and the stock
server both run in one network namespace (tests/netns.py: a veth link through a bridge) whose
`net.ipv4.tcp_congestion_control` is set to CC (a namespace has its own; the servers send the
bytes of a get, so theirs is the setting that counts), the LMCache client in the root namespace,
each CC of --cc in its own namespace. Across a veth link our sockets keep the namespace's default
(transport/blocking.py switches only loopback connections to Reno), so both servers then run
with the same congestion control. Per sample, on fresh keys stored first (untimed):
    single   `RemoteBackend.get_blocking(key)` for each of the `count` keys, one after another
    batched  `RemoteBackend.batched_get_blocking(keys)` (LMCache's retrieve path)
every chunk verified against its source after the clock stops; the two orders alternate per
repeat and the backends rotate. Ratios are stock time / native time per repeat, medians.

Part B, on loopback (mounts, worker and client on one host, one network namespace): chunks stored
through one mount (node "bench-writer"), then read by LMCache's `fs://` connector through one of two
reader mounts: node "bench-client" (a reader on another node than the owner: its data plane is
TCP) or node "bench-worker", the worker's own (a reader on the owner's node: blocks are read through
the descriptors the worker passes over its unix socket, fuse/localfds.py). The first read on that
node is cold (nothing of the chunk in its kernel cache), the second is warm (unchanged chunks: the
mount keeps the page cache across opens). Beside them, the native plugin's batched get of the same
number of chunks in the same repeats (node "bench-client": TCP). Around each cold read the child
scrapes the worker's and that reader mount's counters: READ_BLOCKs per FUSE read, and the worker's
open short-circuit connections, say whether short-circuit engaged. The ceiling of the fs:// way
itself: the same connector over a plain directory of the host's file system (no FUSE, no
curvine), written and read the same way; its cold read comes from the disk (the files written
back and dropped from the page cache first), its warm one from the page cache, so its warm row is
what the connector reaches when no file system is in the way.

Writes bench/results/lmcache-same-tcp.json and its section of docs/benchmarks.md (`--quick`: a
.quick.json and no doc).
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench import common
from bench.lmcache import LLAMA_8B, TOKEN, Rig, _pid, chunk_bytes, plugin_entry
from bench.rawpair import REQUEST, process_cpu, raw_server, recv_exactly_into

NAME = "lmcache-same-tcp"
TARGETS = {"single": 1.0, "batched": 1.5, "fs_cold": 0.5, "fs_warm": 1.0}


# -- the measuring child (real LMCache objects) --------------------------------------------------
def child(spec: dict[str, Any]) -> dict[str, Any]:
    import mmap
    import socket
    import threading

    import xxhash

    geometry, count, repeats = spec["geometry"], int(spec["count"]), int(spec["repeats"])
    size = chunk_bytes(geometry)
    rig = Rig(geometry, count, cpu_chunks=3 * count + 2, seed=2000)
    build = rig.build

    backends = {entry["name"]: build(entry) for entry in spec["backends"]}
    writers = {entry["name"]: backends[entry["writer"]] for entry in spec["backends"] if entry.get("writer")}

    def put(name: str) -> list[Any]:
        keys = rig.keys()
        rig.put(name, writers.get(name, backends[name]), keys)
        deadline = time.monotonic() + 30
        while not backends[name].contains(keys[-1]):   # visible to the reader (lm:// puts have no reply)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: the last chunk put is not visible")
            time.sleep(0.01)
        return keys

    def check(name: str, got: list[Any]) -> None:
        try:
            rig.verify(name, got)
        finally:
            rig.release(got)

    pids: dict[str, int] = {k: int(v) for k, v in spec.get("server_pids", {}).items()}

    def cpu_now(name: str) -> tuple[float, float]:
        """CPU seconds so far of this process and of `name`'s server (0 when not metered)."""
        pid = pids.get(name, 0)
        return process_cpu(os.getpid()), (process_cpu(pid) if pid else 0.0)

    cpu_used: dict[str, list[tuple[float, float]]] = {}

    def metered(name: str, how: str, run: Any) -> float:
        """Seconds of `run()`; its CPU (client, server) per GB is kept under name/how."""
        c0 = cpu_now(name)
        t0 = time.perf_counter()
        got = run()
        seconds = time.perf_counter() - t0
        c1 = cpu_now(name)
        gigabytes = size * count / 1e9
        cpu_used.setdefault(f"{name}/{how}", []).append(((c1[0] - c0[0]) / gigabytes, (c1[1] - c0[1]) / gigabytes))
        if got is not None:
            check(name, got)
        return seconds

    def timed(name: str, how: str, keys: list[Any]) -> float:
        backend = backends[name]
        if how == "single":
            return metered(name, how, lambda: [backend.get_blocking(k) for k in keys])
        return metered(name, how, lambda: backend.batched_get_blocking(keys))

    # The raw pair (bench/rawpair.py) beside the servers: `count` serial sendfile gets, received
    # into one mmap; "verified" also hashes each 1 MiB chunk as it lands, as our client does.
    def raw_connection() -> socket.socket:
        sock = socket.create_connection((spec["raw"][0], int(spec["raw"][1])))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    raw_sock = raw_connection() if spec.get("raw") else None
    raw_in = memoryview(mmap.mmap(-1, size))
    # The same gets striped over `raw_streams` connections at once, as a batched get stripes one
    # owner's keys (client/kv.py BATCH_STREAMS): the ceiling of a batch from one owner.
    raw_streams = [raw_connection() for _ in range(int(spec.get("raw_streams", 0)) if raw_sock else 0)]
    stream_in = [memoryview(mmap.mmap(-1, size)) for _ in raw_streams]

    def raw_gets(verify: bool) -> None:
        assert raw_sock is not None
        for _ in range(count):
            raw_sock.sendall(REQUEST.pack(b"G", size))
            if not verify:
                recv_exactly_into(raw_sock, raw_in)
                continue
            for start in range(0, size, 1 << 20):
                piece = raw_in[start:start + (1 << 20)]
                recv_exactly_into(raw_sock, piece)
                xxhash.xxh3_64_intdigest(piece)

    def raw_striped() -> None:
        def stream(s: int) -> None:
            for _ in range(s, count, len(raw_streams)):
                raw_streams[s].sendall(REQUEST.pack(b"G", size))
                recv_exactly_into(raw_streams[s], stream_in[s])
        threads = [threading.Thread(target=stream, args=(s,)) for s in range(1, len(raw_streams))]
        for thread in threads:
            thread.start()
        stream(0)
        for thread in threads:
            thread.join()

    def raw_sample() -> dict[str, float]:
        out = {"single_s": metered("raw", "single", lambda: raw_gets(False)),
               "verified_s": metered("raw", "verified", lambda: raw_gets(True))}
        if raw_streams:
            out["striped_s"] = metered("raw", "striped", raw_striped)
        return out

    scrapes: dict[str, str] = spec.get("scrape", {})
    counted: dict[str, list[dict[str, float]]] = {}

    def counted_read(name: str, keys: list[Any], how: str) -> float:
        """A read of `name` (how: cold or warm), with the deltas of the worker's and `name`'s mount
        counters around it, kept under name/how."""
        ends = {"worker": scrapes["worker"], "mount": scrapes[name]} if name in scrapes else {}
        before = {end: common.scrape(url, COUNTERS) for end, url in ends.items()}
        seconds = timed(name, "batched", keys)
        after = {end: common.scrape(url, COUNTERS) for end, url in ends.items()}
        if ends:
            delta = {f"{end}:{k}": v - before[end].get(k, 0.0) for end in ends for k, v in after[end].items()}
            delta["worker:shortcircuit_open"] = after["worker"].get(SHORTCIRCUIT_OPEN, 0.0)
            counted.setdefault(f"{name}/{how}", []).append(delta)
        return seconds

    drop_dirs: dict[str, str] = spec.get("drop_cache", {})

    def sample(name: str, r: int) -> dict[str, float]:
        keys = put(name)
        try:
            if name in writers:     # fs://: written through another mount, read here twice
                if name in drop_dirs:
                    drop_page_cache(drop_dirs[name])
                return {"cold_s": counted_read(name, keys, "cold"), "warm_s": counted_read(name, keys, "warm")}
            order = ("single", "batched") if r % 2 == 0 else ("batched", "single")
            return {f"{how}_s": timed(name, how, keys) for how in order}
        finally:
            for key in keys:
                with contextlib.suppress(Exception):
                    writers.get(name, backends[name]).connection.remove_sync(key)

    # A backend that only writes for another (fs_write) is not a row of its own: not sampled.
    measured = [name for name in backends if name not in {e.get("writer") for e in spec["backends"]}]
    for name in measured:     # warm-up: connections, pools, server allocations
        sample(name, 0)
    if raw_sock is not None:
        raw_sample()
    cpu_used.clear()      # the repeats' CPU only
    counted.clear()
    out: dict[str, Any] = {"chunk_bytes": size, "count": count, "backends": {name: [] for name in measured}}
    if raw_sock is not None:
        out["backends"]["raw"] = []
    names = list(out["backends"])
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            out["backends"][name].append(raw_sample() if name == "raw" else sample(name, r))
        print(f"  repeat {r + 1}/{repeats} done", file=sys.stderr, flush=True)
    out["cpu_s_per_gb"] = cpu_used
    out["read_counters"] = counted
    return out


def drop_page_cache(directory: str) -> None:
    """Writes back, then drops from the page cache, every file under `directory` (a cold read of a
    plain directory then comes from the disk, as a first read on a node comes over the network)."""
    os.sync()
    for top, _, files in os.walk(directory):
        for file in files:
            fd = os.open(os.path.join(top, file), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def child_main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    result_fd = os.dup(1)
    os.dup2(2, 1)    # LMCache prints on stdout; ours carries one JSON line
    try:
        result, code = {"ok": True, **child(spec)}, 0
    except BaseException as exc:  # noqa: BLE001 - the parent always gets a JSON line
        import traceback
        traceback.print_exc()
        result, code = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, 1
    os.write(result_fd, (json.dumps(result) + "\n").encode())
    sys.stderr.flush()
    os._exit(code)


def run_child(spec: dict[str, Any], timeout: float = 1800.0) -> dict[str, Any]:
    from tests.lmcache.harness import lmcache_env

    proc = subprocess.run([sys.executable, "-m", "bench.lmcache_same_tcp", "--child", json.dumps(spec)],
                          cwd=common.REPO, env=lmcache_env(), stdout=subprocess.PIPE, text=True, timeout=timeout,
                          check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {"ok": False, "error": "no JSON line"}
    if not result.get("ok"):
        raise SystemExit(f"bench child failed (rc={proc.returncode}): {result.get('error')}")
    return result


# -- the setups ------------------------------------------------------------------------------------
def same_tcp(root: pathlib.Path, args: Any, cc: str) -> dict[str, Any]:
    """Part A with congestion control `cc` in the servers' namespace."""
    from curvine_py.client.kv import BATCH_STREAMS
    from curvine_py.procs import curvine_command, start
    from tests.harness import Cluster
    from tests.lmcache.harness import StockLMServer
    from tests.netns import network_namespaces

    with contextlib.ExitStack() as stack:
        lab = stack.enter_context(network_namespaces(1))
        ns = lab[0]
        ns.run(["sysctl", "-q", "-w", f"net.ipv4.tcp_congestion_control={cc}"], check=True)
        set_to = ns.run(["sysctl", "-n", "net.ipv4.tcp_congestion_control"], check=True,
                        capture_output=True, text=True).stdout.strip()
        if set_to != cc:
            raise SystemExit(f"namespace congestion control is {set_to!r}, not {cc!r}")
        cluster = stack.enter_context(Cluster(root / f"cluster-{cc}", workers=0, token=TOKEN, host=lab.root_address))
        data = root / f"worker-{cc}"
        data.mkdir(parents=True)
        worker = start(f"worker-{cc}", [*ns.prefix, *curvine_command(
            "worker", "--master", cluster.master_address, "--data-dir", str(data), "--host", ns.address,
            "--port", "0", "--node", "ns-worker", "--token", TOKEN, "--lm-port", "-1")], ready_prefix="worker=")
        stack.callback(worker.stop)
        cluster.wait_for_live_workers(1)
        stock = stack.enter_context(StockLMServer(host=ns.address, prefix=ns.prefix))
        raw = stack.enter_context(raw_server(ns.address, data / "raw", prefix=ns.prefix))
        backends = [plugin_entry("native", cluster.master_address, node="bench-client", token=TOKEN),
                    {"name": "lm_stock", "url": stock.url}]
        spec = {"geometry": LLAMA_8B, "count": args.count, "repeats": args.repeats, "backends": backends,
                "raw": list(raw[:2]), "raw_streams": BATCH_STREAMS,
                "server_pids": {"native": worker.process.pid, "lm_stock": _pid(stock), "raw": raw[2]}}
        print(f"same TCP ({cc}): native vs stock lm, {args.count} x {chunk_bytes(LLAMA_8B) >> 20} MiB, "
              f"{args.repeats} repeats", file=sys.stderr, flush=True)
        return {"cc": cc, **run_child(spec)}


def fs_rows(root: pathlib.Path, args: Any) -> dict[str, Any]:
    """Part B: fs:// over the mount, cold and warm, beside the native plugin, on loopback."""
    from curvine_py.core.domain import Policy, StorageClass
    from tests.fuse.mounts import Mount
    from tests.harness import Cluster

    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(Cluster(root / "cluster-fs", workers=1, node_names=[WORKER_NODE],
                                              worker_args=["--metrics-port", "-1"]))
        cluster.wait_for_live_workers(1)
        client = cluster.client()
        client.fs.mkdir("/lmcache")
        client.fs.set_policy("/lmcache", Policy(storage_class=StorageClass.CACHE))
        writer_mnt, reader_mnt, local_mnt = root / "mnt-writer", root / "mnt-reader", root / "mnt-local"
        stack.enter_context(Mount(cluster.master_address, writer_mnt, args=["--node", "bench-writer"]))
        reader = stack.enter_context(Mount(cluster.master_address, reader_mnt,
                                           args=["--node", "bench-client", "--metrics-port", "-1"]))
        # The worker's node name: the mount finds the owner's unix socket in the master's view
        # (same host, same file system) and reads its blocks by descriptor.
        local = stack.enter_context(Mount(cluster.master_address, local_mnt,
                                          args=["--node", WORKER_NODE, "--metrics-port", "-1"]))
        plain = root / "plain-dir" / "lmcache"     # the ceiling: the connector on the host's file system
        plain.mkdir(parents=True)
        backends = [plugin_entry("native", cluster.master_address, node="bench-client"),
                    {"name": "fs_write", "url": f"fs://localhost:0{writer_mnt}/lmcache"},
                    {"name": "fs_read", "url": f"fs://localhost:0{reader_mnt}/lmcache", "writer": "fs_write"},
                    {"name": "fs_local", "url": f"fs://localhost:0{local_mnt}/lmcache", "writer": "fs_write"},
                    {"name": "fs_plain_write", "url": f"fs://localhost:0{plain}"},
                    {"name": "fs_plain", "url": f"fs://localhost:0{plain}", "writer": "fs_plain_write"}]
        worker = cluster.workers[0]
        assert worker is not None and reader.process is not None and local.process is not None
        endpoints = {"mount": reader.process.field("metrics"), "worker": worker.field("metrics"),
                     "mount_local": local.process.field("metrics")}
        spec = {"geometry": LLAMA_8B, "count": args.count, "repeats": args.repeats, "backends": backends,
                "scrape": {"worker": endpoints["worker"], "fs_read": endpoints["mount"],
                           "fs_local": endpoints["mount_local"]},
                "drop_cache": {"fs_plain": str(plain)}}
        print(f"fs:// cold/warm (reader on another node, on the owner's node) vs native on loopback, "
              f"{args.count} x {chunk_bytes(LLAMA_8B) >> 20} MiB, {args.repeats} repeats", file=sys.stderr, flush=True)
        before = {name: common.scrape(url, COUNTERS) for name, url in endpoints.items()}
        result = run_child(spec)
        after = {name: common.scrape(url, COUNTERS) for name, url in endpoints.items()}
        # Whether short-circuit engaged, from the kernel's side: unix connections from each reader
        # mount's process to the worker's short-circuit socket, while both are still up.
        result["unix_links"] = {name: unix_links(mount.process.process.pid, worker.process.pid)
                                for name, mount in (("fs_read", reader), ("fs_local", local))
                                if mount.process is not None}
        # Where a cold read's time goes: the reader mount's FUSE reads (warm reads never reach
        # it: the kernel's page cache answers them) and the worker's block reads behind them.
        result["counters"] = {name: {k: after[name].get(k, 0.0) - before[name].get(k, 0.0) for k in after[name]}
                              for name in endpoints}
        return result


def unix_links(client_pid: int, server_pid: int) -> int:
    """Established unix stream connections from `client_pid` to a worker.sock that `server_pid`
    listens on, from `ss -xp`."""
    out = subprocess.run(["ss", "-xpnH", "state", "established"], capture_output=True, text=True,
                         check=True).stdout
    return count_links(out, client_pid, server_pid)


def count_links(ss_text: str, client_pid: int, server_pid: int) -> int:
    """The connections of `unix_links` in the text of `ss -xpnH state established`: the accepted
    end names the socket path and its own inode, the connecting end names the peer's inode."""
    served, clients = set(), []
    for line in ss_text.splitlines():
        fields = line.split()
        if len(fields) < 7 or fields[0] != "u_str":
            continue
        local, inode, peer = fields[3], fields[4], fields[6]
        if local.endswith("/worker.sock") and f"pid={server_pid}," in line:
            served.add(inode)
        elif f"pid={client_pid}," in line:
            clients.append(peer)
    return sum(1 for peer in clients if peer in served)


WORKER_NODE = "bench-worker"
PLAIN = "fs_plain"
FS_READERS = {"fs_read": "reader on another node (TCP)", "fs_local": "reader on the owner's node (short-circuit)",
              "fs_plain": "a plain local directory, no FUSE (the connector's ceiling)"}
SHORTCIRCUIT_OPEN = 'curvine_open_connections{listener="shortcircuit"}'
COUNTERS = (SHORTCIRCUIT_OPEN, 'curvine_mount_requests_total{op="read"}', 'curvine_mount_request_duration_seconds_sum{op="read"}',
            'curvine_mount_requests_total{op="open"}', 'curvine_mount_request_duration_seconds_sum{op="open"}',
            'curvine_mount_requests_total{op="lookup"}', 'curvine_sent_bytes_total{way="mount"}',
            'curvine_operation_duration_seconds_count{op="read_block"}',
            'curvine_operation_duration_seconds_sum{op="read_block"}')


# -- report ------------------------------------------------------------------------------------------
def summarize(part_a: list[dict[str, Any]], part_b: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"same_tcp": {}, "fs": None}
    for run in part_a:
        native, stock = run["backends"]["native"], run["backends"]["lm_stock"]
        nbytes = run["chunk_bytes"] * run["count"]
        row: dict[str, Any] = {}
        for how in ("single", "batched"):
            row[how] = {
                "native_ms": common.median(s[f"{how}_s"] * 1e3 for s in native),
                "stock_ms": common.median(s[f"{how}_s"] * 1e3 for s in stock),
                "native_gbps": common.median(common.gbps(nbytes, s[f"{how}_s"]) for s in native),
                "stock_gbps": common.median(common.gbps(nbytes, s[f"{how}_s"]) for s in stock),
                "ratio": common.median(b[f"{how}_s"] / a[f"{how}_s"] for a, b in zip(native, stock, strict=True)),
            }
        cpu = run.get("cpu_s_per_gb", {})
        paths = {}
        for label, name, how in (("raw pair, serial", "raw", "single"),
                                 ("raw pair, serial, each 1 MiB hashed as received", "raw", "verified"),
                                 ("raw pair, the gets striped over the batch's connections at once", "raw",
                                  "striped"),
                                 ("native plugin, single gets", "native", "single"),
                                 ("native plugin, batched", "native", "batched"),
                                 ("stock lm server, single gets", "lm_stock", "single"),
                                 ("stock lm server, batched", "lm_stock", "batched")):
            key = "single_s" if name == "raw" and how == "single" else f"{how}_s"
            samples = [x for x in run["backends"].get(name, []) if key in x]   # striped: newer runs only
            if not samples:
                continue
            used = cpu.get(f"{name}/{how}", [])
            paths[label] = {"ms": common.median(x[key] * 1e3 for x in samples),
                            "gbps": common.median(common.gbps(nbytes, x[key]) for x in samples),
                            "cpu": [common.median(c for c, _ in used), common.median(v for _, v in used)]
                            if used else None}
        row["paths"] = paths
        out["same_tcp"][run["cc"]] = row
    if part_b is not None:
        native = part_b["backends"]["native"]
        nbytes = part_b["chunk_bytes"] * part_b["count"]
        out["fs"] = {"native_batched_gbps": common.median(common.gbps(nbytes, s["batched_s"]) for s in native),
                     "readers": {}}
        for name in FS_READERS:
            fs = part_b["backends"].get(name)
            if not fs:
                continue
            row = {
                **{f"{how}_gbps": common.median(common.gbps(nbytes, s[f"{how}_s"]) for s in fs)
                   for how in ("cold", "warm")},
                **{f"{how}_ratio": common.median(a["batched_s"] / b[f"{how}_s"]
                                                 for a, b in zip(native, fs, strict=True))
                   for how in ("cold", "warm")},
            }
            counted = part_b.get("read_counters", {})
            where = cold_where(counted.get(f"{name}/cold", []))
            if where:
                row["where"] = where
                row["warm_fuse_reads"] = common.median(
                    d.get('mount:curvine_mount_requests_total{op="read"}', 0.0) for d in counted[f"{name}/warm"])
            row["unix_links"] = part_b.get("unix_links", {}).get(name)
            plain = part_b["backends"].get(PLAIN)
            if plain and name != PLAIN:   # the mount's warm read against the connector's ceiling
                row["warm_vs_plain"] = common.median(a["warm_s"] / b["warm_s"] for a, b in zip(plain, fs, strict=True))
            out["fs"]["readers"][name] = row
    return out


def cold_where(deltas: list[dict[str, float]]) -> dict[str, float] | None:
    """Medians over the repeats' cold reads of one reader: its mount's FUSE reads and the worker's
    READ_BLOCKs behind them, and the worker's open short-circuit connections after the read."""
    def med(key: str) -> float:
        return common.median(d.get(key, 0.0) for d in deltas)

    if not deltas:   # a reader without a mount (the plain directory)
        return None
    reads = med('mount:curvine_mount_requests_total{op="read"}')
    if not reads:
        return None
    blocks = med('worker:curvine_operation_duration_seconds_count{op="read_block"}')
    return {"fuse_reads": reads,
            "fuse_read_kib": med('mount:curvine_sent_bytes_total{way="mount"}') / reads / 1024,
            "fuse_read_us": med('mount:curvine_mount_request_duration_seconds_sum{op="read"}') / reads * 1e6,
            "block_reads": blocks,
            "block_read_us": (med('worker:curvine_operation_duration_seconds_sum{op="read_block"}')
                              / max(1.0, blocks) * 1e6),
            "shortcircuit_open": med("worker:shortcircuit_open")}


def _verdict(value: float, target: float) -> str:
    return f"{value:.2f}x (target >= {target:g}x: {'met' if value >= target else '**missed**'})"


def render(payload: dict[str, Any]) -> str:
    s, p = payload["summary"], payload["parameters"]
    mib = chunk_bytes(LLAMA_8B) >> 20
    lines = [
        "## LMCache with the same TCP settings: native plugin vs the stock lm:// server; fs:// cold and warm",
        "",
        common.machine_line(payload["machine"]),
        "",
        (f"`python -m bench.lmcache_same_tcp` (module docstring). {p['count']} chunks of {mib} MiB per sample, "
         f"medians of {p['repeats']} repeats. Both servers in one network namespace whose "
         "`net.ipv4.tcp_congestion_control` is set to the row's value, the LMCache client in the root namespace "
         "across a veth link; single = `get_blocking` of each chunk in turn, batched = `batched_get_blocking` "
         "of all of them; every chunk verified after the clock stops. Ratio = stock time / native time, median "
         "of per-repeat ratios."),
        "",
        common.table(["servers' congestion control", "get", "native ms", "stock lm ms", "native GB/s", "stock GB/s",
                      "native vs stock"],
                     [[cc, how, f"{r[how]['native_ms']:.1f}", f"{r[how]['stock_ms']:.1f}",
                       f"{r[how]['native_gbps']:.2f}", f"{r[how]['stock_gbps']:.2f}",
                       _verdict(r[how]["ratio"], TARGETS[how])]
                      for cc, r in s["same_tcp"].items() for how in ("single", "batched")]),
        "",
        ("Every path in the same repeats, with the raw socket pair (bench/rawpair.py: `sendfile` from the page "
         "cache in the servers' namespace, `recv_into` an mmap here) as the ceiling of one serial stream, and "
         "the same gets striped over as many connections at once as a batched get uses for one owner "
         "(client/kv.py BATCH_STREAMS) as the ceiling of a batch; CPU = seconds per GB of this (client) "
         "process and of the serving process:"),
        "",
        common.table(["servers' congestion control", "path", "ms", "GB/s", "CPU s/GB client / server"],
                     [[cc, label, f"{v['ms']:.1f}", f"{v['gbps']:.2f}",
                       " / ".join(f"{c:.2f}" for c in v["cpu"]) if v["cpu"] else "n/a"]
                      for cc, r in s["same_tcp"].items() for label, v in r.get("paths", {}).items()]),
    ]
    fs = s["fs"]
    if fs:
        readers = fs["readers"]
        rows = [["native plugin (TCP), batched get", "", f"{fs['native_batched_gbps']:.2f}", "1.00x"]]
        for name, r in readers.items():
            if name == PLAIN:    # a ceiling, not a subject: no verdict
                rows += [[f"`fs://`, {FS_READERS[name]}", "cold (from the disk: page cache dropped)",
                          f"{r['cold_gbps']:.2f}", f"{r['cold_ratio']:.2f}x"],
                         [f"`fs://`, {FS_READERS[name]}", "warm (from the page cache)", f"{r['warm_gbps']:.2f}",
                          f"{r['warm_ratio']:.2f}x"]]
                continue
            warm = _verdict(r["warm_ratio"], TARGETS["fs_warm"])
            if "warm_vs_plain" in r:
                warm += f"; {r['warm_vs_plain']:.2f}x the plain directory's warm read"
            rows += [[f"`fs://`, {FS_READERS[name]}", "cold (first read on the node)", f"{r['cold_gbps']:.2f}",
                      _verdict(r["cold_ratio"], TARGETS["fs_cold"])],
                     [f"`fs://`, {FS_READERS[name]}", "warm (second read, unchanged chunks)",
                      f"{r['warm_gbps']:.2f}", warm]]
        lines += [
            "",
            (f"`fs://` over the mount, on loopback ({p['count']} x {mib} MiB written through another mount, then "
             "read by LMCache's fs connector through a reader mount: the first read cold, the second warm), "
             "against the native plugin's batched get (TCP) in the same repeats. Two reader mounts: one with "
             "another node name than the worker's (TCP), one with the worker's (short-circuit, "
             "fuse/localfds.py); and the connector's ceiling, the same connector over a plain directory of the "
             "host's file system (no FUSE); ratio = median of per-repeat ratios:"),
            "",
            common.table(["reader", "read", "GB/s", "vs native plugin get"], rows),
        ]
        notes = []
        for name, r in readers.items():
            w = r.get("where")
            if w:
                notes.append(
                    f"{FS_READERS[name]}: {w['fuse_reads']:,.0f} FUSE reads of {w['fuse_read_kib']:.0f} KiB, "
                    f"{w['fuse_read_us']:.0f} us each in the mount's handler; {w['block_reads']:,.0f} READ_BLOCKs "
                    f"on the worker, {w['block_read_us']:.0f} us each; {r.get('unix_links') or 0} unix "
                    "connection(s) from this mount to the worker's short-circuit socket (`ss -xp`, after the run); "
                    f"{r.get('warm_fuse_reads', 0):,.0f} FUSE reads reached it during a warm read")
        if notes:
            lines += ["", ("Counters per cold read (medians over the repeats; the reader mount's and the worker's "
                           "/metrics around it): " + "; ".join(notes) + ".")]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--child":
        return child_main(argv[1:])
    p = common.parser(NAME, __doc__.splitlines()[0], repeats=5)
    p.add_argument("--count", type=int, default=8, help="32 MiB chunks per sample (default 8)")
    p.add_argument("--cc", default="reno,bbr", help="congestion controls of the servers' namespace (default reno,bbr)")
    p.add_argument("--no-fs", action="store_true", help="skip the fs:// rows")
    p.add_argument("--dir", default="/var/tmp", help="where data dirs live (default /var/tmp)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.count = min(args.repeats, 2), min(args.count, 4)
    sys.path.insert(0, str(common.REPO))
    info = common.machine()    # the load average before this run, not after it
    root = pathlib.Path(tempfile.mkdtemp(prefix="curvine-bench-same-tcp-", dir=args.dir))
    root.chmod(0o755)
    try:
        part_a = [same_tcp(root, args, cc) for cc in args.cc.split(",") if cc]
        part_b = None if args.no_fs else fs_rows(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    payload = {"benchmark": NAME, "machine": info,
               "parameters": {"count": args.count, "repeats": args.repeats, "cc": args.cc, "quick": args.quick},
               "samples": {"same_tcp": part_a, "fs": part_b}, "summary": summarize(part_a, part_b)}
    print(json.dumps(payload["summary"], indent=1))
    common.publish(NAME, args, payload, render(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
