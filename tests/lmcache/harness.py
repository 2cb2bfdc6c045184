"""Drives REAL LMCache 0.5.6 against a remote tier, for tests and benchmarks: the baselines (stock
`lm://` server, Redis) and, later, curvine-py's own backends are exercised the same way.

Non-MP (LMCache inside the serving engine), one engine per process (engine_proc.py)::

    with StockLMServer() as server:
        cfg = engine_config(remote_url=server.url)
        writer, reader = store_and_retrieve(cfg, tokens=1024, seed=7)
        assert reader.op("retrieve")["bit_exact"]

    # or step by step, e.g. with the engine inside a network namespace:
    res = run_engine(EngineJob(cfg, ops=["store", "flush"]), prefix=["ip", "netns", "exec", "ns0"])

MP mode (`lmcache server` owning L1 + an L2 adapter given as JSON)::

    run_l2_bench({"type": "resp", "host": h, "port": p})        # lmcache bench l2 --no-skip-verify
    run_l2_basic_check({"type": "native_plugin", ...})          # basic_check --mode test_l2_adapter
    with MPServer(l2_adapter={...}) as mp:
        run_server_bench(mp, start=0, end=4)                    # lmcache bench server --mode cpu

Every process gets a hermetic environment (`lmcache_env`): inherited LMCACHE_* variables are
dropped, PYTHONHASHSEED=0 (LMCache's builtin chunk hash must agree across processes),
LMCACHE_TRACK_USAGE=false (no telemetry posts), banner off. Servers log to files under a temp dir
(never to a pipe nobody reads); failures carry the log tail.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from tests.lmcache.engines import (
    DEFAULT_TIMEOUT,
    LMCACHE_CLI,
    PYTHON,
    REPO_ROOT,
    EngineJob,
    EngineProcess,
    EngineResult,
    Model,
    _tail,
    basic_check_module,
    engine_config,
    free_port,
    has_lm_protocol,
    lmcache_available,
    lmcache_env,
    lmcache_version,
    require_lm_protocol,
    require_lmcache,
    run_engine,
    store_and_retrieve,
)


class Background:
    """A long-running child process with its output in a log file; a context manager that stops
    it (SIGTERM, then SIGKILL) on exit. Subclasses define `argv` and `wait_ready`."""

    name = "process"

    def __init__(self, *, prefix: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 log_dir: pathlib.Path | None = None, ready_timeout: float = 60.0) -> None:
        self.prefix = list(prefix)
        self.env = lmcache_env(env)
        self.ready_timeout = ready_timeout
        self._own_dir = log_dir is None
        self.log_dir = pathlib.Path(log_dir or tempfile.mkdtemp(prefix=f"curvine-{self.name}-"))
        self.log_path = self.log_dir / f"{self.name}-{os.getpid()}-{id(self):x}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def wait_ready(self, deadline: float) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([*self.prefix, *self.argv()], cwd=REPO_ROOT, env=self.env,
                                            stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self.wait_ready(time.monotonic() + self.ready_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            raise RuntimeError(f"{self.name} exited early (rc={self.process and self.process.poll()}):\n"
                               f"{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return _tail(self.log_path.read_text(errors="replace"), lines)
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> int | None:
        proc = self.process
        if proc is None:
            return None
        if proc.poll() is None:
            # The whole session: `ip netns exec` and lmcache's own children go too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return proc.returncode

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._own_dir and exc[0] is None:
            shutil.rmtree(self.log_dir, ignore_errors=True)


def wait_tcp(host: str, port: int, deadline: float, owner: Background) -> None:
    while True:
        owner.check_alive()
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{owner.name} not listening on {host}:{port}:\n{owner.log_tail()}")
        time.sleep(0.05)


class TcpServer(Background):
    """A background server on one TCP address (a free port unless given)."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.host = host
        self.port = port or free_port(host if not self.prefix else "127.0.0.1")


class StockLMServer(TcpServer):
    """LMCache's own `lm://` server: `python -m lmcache.v1.server HOST PORT cpu` (in-memory, no
    eviction). The ready probe is a TCP connect: the server handles each connection in a thread
    and simply sees a client that disconnects. LMCache <= 0.5.6 only (0.5.7 removed it): a test
    using it calls require_lm_protocol() first; start() on a newer LMCache raises the clear error."""

    name = "lmserver"

    @property
    def url(self) -> str:
        return f"lm://{self.host}:{self.port}"

    def argv(self) -> list[str]:
        if not has_lm_protocol():
            from curvine_py.lmcache.compat import lm_protocol_error
            raise lm_protocol_error(lmcache_version())
        return [PYTHON, "-m", "lmcache.v1.server", self.host, str(self.port), "cpu"]

    def wait_ready(self, deadline: float) -> None:
        wait_tcp(self.host, self.port, deadline, self)


class RedisServer(TcpServer):
    """A throwaway redis-server: no persistence, bound to one address."""

    name = "redis"

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}"

    def argv(self) -> list[str]:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        return [binary, "--bind", self.host, "--port", str(self.port), "--save", "", "--appendonly",
                "no", "--protected-mode", "no", "--daemonize", "no", "--dir", str(self.log_dir)]

    def command(self, *args: str) -> bytes:
        """One RESP command over a fresh connection (PING, DBSIZE, FLUSHALL...): raw reply line."""
        payload = f"*{len(args)}\r\n".encode() + b"".join(
            f"${len(a.encode())}\r\n".encode() + a.encode() + b"\r\n" for a in args)
        with socket.create_connection((self.host, self.port), timeout=5) as sock:
            sock.sendall(payload)
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
        return reply.strip()

    def dbsize(self) -> int:
        reply = self.command("DBSIZE")
        assert reply.startswith(b":"), reply
        return int(reply[1:])

    def wait_ready(self, deadline: float) -> None:
        while True:
            self.check_alive()
            with contextlib.suppress(OSError):
                if self.command("PING") == b"+PONG":
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"redis not ready on {self.host}:{self.port}:\n{self.log_tail()}")
            time.sleep(0.05)


# -- MP mode -----------------------------------------------------------------------------------

class MPServer(Background):
    """`lmcache server` (LMCache multiprocess mode) with one or more `--l2-adapter` JSON specs.
    Ready when its HTTP API answers. MP mode ignores remote_url/remote_storage_plugins: its L2 is
    the adapters only."""

    name = "mpserver"

    def __init__(self, l2_adapters: Sequence[Mapping[str, Any]] = (), *, host: str = "127.0.0.1",
                 chunk_size: int = 256, l1_size_gb: float = 0.25, extra_args: Sequence[str] = (),
                 **kw: Any) -> None:
        kw.setdefault("ready_timeout", 90.0)
        super().__init__(**kw)
        self.host = host
        self.l2_adapters = [dict(a) for a in l2_adapters]
        self.chunk_size = chunk_size
        self.l1_size_gb = l1_size_gb
        self.extra_args = list(extra_args)
        # Inside a namespace (`prefix`) the host may not exist here: probe loopback (the fresh
        # namespace has nothing listening anyway).
        probe = host if not self.prefix else "127.0.0.1"
        self.port = free_port(probe)
        self.http_port = free_port(probe)
        self.prometheus_port = free_port(probe)

    @property
    def rpc_url(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    def argv(self) -> list[str]:
        argv = [*LMCACHE_CLI, "server", "--host", self.host, "--port", str(self.port),
                "--http-host", self.host, "--http-port", str(self.http_port),
                "--prometheus-port", str(self.prometheus_port), "--chunk-size", str(self.chunk_size),
                "--l1-size-gb", str(self.l1_size_gb), "--eviction-policy", "LRU"]
        for adapter in self.l2_adapters:
            argv += ["--l2-adapter", json.dumps(adapter)]
        return argv + self.extra_args

    def wait_ready(self, deadline: float) -> None:
        while True:
            self.check_alive()
            try:
                with urllib.request.urlopen(self.http_url + "/", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"lmcache server not ready at {self.http_url}:\n{self.log_tail()}")
            time.sleep(0.2)


@dataclass(frozen=True)
class ToolResult:
    """A finished LMCache CLI run: exit code, output, and what was parsed from it."""

    returncode: int
    stdout: str
    stderr: str
    wall_seconds: float
    metrics: dict[str, Any] = field(default_factory=dict)
    ok: bool = False

    def describe(self) -> str:
        return (f"rc={self.returncode} ok={self.ok}\n--- stdout tail ---\n{_tail(self.stdout)}"
                f"\n--- stderr tail ---\n{_tail(self.stderr)}")


def _run_tool(argv: Sequence[str], *, prefix: Sequence[str], env: Mapping[str, str] | None,
              timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.perf_counter()
    proc = subprocess.run([*prefix, *argv], check=False, cwd=REPO_ROOT, env=lmcache_env(env),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return proc, time.perf_counter() - t0


def run_l2_bench(adapter: Mapping[str, Any], *, num_keys: int = 16, in_flight: int = 2,
                 data_size_kb: int = 1024, rounds: int = 2, prefix: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT) -> ToolResult:
    """`lmcache bench l2 --l2-adapter JSON --no-skip-verify`: store, lookup, load through the L2
    adapter alone (no server), verifying the last round byte for byte. `metrics` holds the JSON
    report (op_0 Store, op_1 Lookup, op_2 Load with throughput_avg_mbps...); `ok` needs exit 0
    and the verify line."""
    with tempfile.TemporaryDirectory(prefix="curvine-l2bench-") as tmp:
        out = pathlib.Path(tmp) / "bench.json"
        proc, wall = _run_tool(
            [*LMCACHE_CLI, "bench", "l2", "--l2-adapter", json.dumps(dict(adapter)), "--num-keys",
             str(num_keys), "--in-flight", str(in_flight), "--data-size-kb", str(data_size_kb),
             "--rounds", str(rounds), "--no-skip-verify", "--format", "json", "--output", str(out)],
            prefix=prefix, env=env, timeout=timeout)
        metrics = json.loads(out.read_text()).get("metrics", {}) if out.exists() else {}
    verified = re.search(r"\[Verify\] All \d+ keys data verified OK", proc.stdout) is not None
    return ToolResult(proc.returncode, proc.stdout, proc.stderr, wall, metrics,
                      ok=proc.returncode == 0 and verified)


_VALIDATION = re.compile(r"Validation(?: \(([^)]*)\))?: (\d+)/(\d+)")


# A row of basic_check's performance table: "| GET                  |     0.61 |" -> GET, 0.61 (avg ms)
_TABLE_ROW = re.compile(r"^\|\s*([A-Z][A-Z ()a-z-]*?)\s*\|\s*([\d.]+)\s*\|", re.MULTILINE)


def _validations(stdout: str) -> list[list[Any]]:
    return [[label or "", int(p), int(t)] for label, p, t in _VALIDATION.findall(stdout)]


def _all_validations_pass(found: list[list[Any]]) -> bool:
    return (len(found) >= 4 and all(p == t for _, p, t in found)
            and any("content" in label for label, _, _ in found))


def run_l2_basic_check(adapter: Mapping[str, Any], *, num_keys: int = 5, prefix: Sequence[str] = (),
                       env: Mapping[str, str] | None = None,
                       timeout: float = DEFAULT_TIMEOUT) -> ToolResult:
    """`python -m lmcache[.inprocess].v1.basic_check --mode test_l2_adapter`: absent lookup, store, lookup,
    load + content check. It always exits 0, so `ok` comes from its 'Validation: n/n' lines
    (metrics['validations'] = [[label, passed, total], ...]); all four phases must pass."""
    proc, wall = _run_tool([PYTHON, "-m", basic_check_module(), "--mode", "test_l2_adapter",
                            "--num-keys", str(num_keys), "--l2-adapter", json.dumps(dict(adapter))],
                           prefix=prefix, env=env, timeout=timeout)
    found = _validations(proc.stdout)
    ok = proc.returncode == 0 and _all_validations_pass(found)
    return ToolResult(proc.returncode, proc.stdout, proc.stderr, wall, {"validations": found}, ok)


def run_remote_basic_check(remote_url: str, *, num_keys: int = 5, prefix: Sequence[str] = (),
                           env: Mapping[str, str] | None = None,
                           timeout: float = DEFAULT_TIMEOUT) -> ToolResult:
    """`python -m lmcache[.inprocess].v1.basic_check --mode test_remote` against a non-MP remote URL (config via
    LMCACHE_* env, local CPU tier off): exists (absent), put, exists, get + content check.
    metrics['validations'] as in run_l2_basic_check; metrics['ms'] = {operation: avg ms} from its
    table (e.g. 'GET': 0.6)."""
    extra = {"LMCACHE_REMOTE_URL": remote_url, "LMCACHE_CHUNK_SIZE": "256",
             "LMCACHE_LOCAL_CPU": "False", "LMCACHE_MAX_LOCAL_CPU_SIZE": "1",
             "LMCACHE_REMOTE_SERDE": "naive", **(env or {})}
    proc, wall = _run_tool([PYTHON, "-m", basic_check_module(), "--mode", "test_remote",
                            "--num-keys", str(num_keys)], prefix=prefix, env=extra, timeout=timeout)
    found = _validations(proc.stdout)
    timings = {m.group(1).strip(): float(m.group(2)) for m in _TABLE_ROW.finditer(proc.stdout)}
    ok = proc.returncode == 0 and _all_validations_pass(found)
    return ToolResult(proc.returncode, proc.stdout, proc.stderr, wall,
                      {"validations": found, "ms": timings}, ok)


_LOOKUP = re.compile(r"\[seq (\d+)/(cold|warm)\] LOOKUP: (\d+)/(\d+) chunks hit")


def run_server_bench(mp: MPServer, *, start: int = 0, end: int = 4, num_tokens: int = 1024,
                     interval: float = 0.5, shape_spec: str = "(2,256,16,2,64):bfloat16:4",
                     prefix: Sequence[str] = (), env: Mapping[str, str] | None = None,
                     timeout: float = DEFAULT_TIMEOUT) -> ToolResult:
    """`lmcache bench server --mode cpu --transfer-mode lmcache_driven` against `mp`: per request
    seq, a cold lookup, a store on a miss, a warm lookup and a retrieve with a checksum compare.
    `metrics` = the JSON report plus 'lookups': [[seq, 'cold'|'warm', hit, total], ...]. `ok` =
    exit 0 and no checksum failure. (Checksums are only compared for requests whose cold lookup
    missed; `interval` > 0 because a warm lookup right after a store can race the L1 commit.)"""
    with tempfile.TemporaryDirectory(prefix="curvine-srvbench-") as tmp:
        out = pathlib.Path(tmp) / "bench.json"
        proc, wall = _run_tool(
            [*LMCACHE_CLI, "bench", "server", "--rpc-url", mp.rpc_url, "--mode", "cpu",
             "--transfer-mode", "lmcache_driven", "--num-tokens", str(num_tokens), "--start",
             str(start), "--end", str(end), "--interval", str(interval), "--url", mp.http_url,
             "--kvcache-shape-spec", shape_spec, "--format", "json", "--output", str(out)],
            prefix=prefix, env=env, timeout=timeout)
        metrics = json.loads(out.read_text()).get("metrics", {}) if out.exists() else {}
    metrics["lookups"] = [[int(s), phase, int(h), int(t)] for s, phase, h, t in _LOOKUP.findall(proc.stdout)]
    fails = metrics.get("results", {}).get("checksum_fail", 1)
    return ToolResult(proc.returncode, proc.stdout, proc.stderr, wall, metrics,
                      ok=proc.returncode == 0 and fails == 0)


@contextlib.contextmanager
def servers(*items: Background) -> Iterator[tuple[Background, ...]]:
    """Starts several servers; all are stopped on exit, also when a later one fails to start."""
    with contextlib.ExitStack() as stack:
        yield tuple(stack.enter_context(item) for item in items)


__all__ = [
    "Background", "EngineJob", "EngineProcess", "EngineResult", "MPServer", "Model", "RedisServer", "StockLMServer",
    "ToolResult", "engine_config", "free_port", "has_lm_protocol", "lmcache_available", "lmcache_env",
    "lmcache_version", "require_lm_protocol", "require_lmcache",
    "run_engine", "run_l2_basic_check", "run_l2_bench", "run_remote_basic_check", "run_server_bench", "servers",
    "store_and_retrieve",
]
