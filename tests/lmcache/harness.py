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
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Self

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
PYTHON = sys.executable
# The `lmcache` console script of the running interpreter's venv, run by that interpreter.
_CLI_SCRIPT = pathlib.Path(PYTHON).with_name("lmcache")
LMCACHE_CLI = ([PYTHON, str(_CLI_SCRIPT)] if _CLI_SCRIPT.exists()
               else [PYTHON, "-c", "import sys; from lmcache.cli.main import main; sys.exit(main())"])
DEFAULT_TIMEOUT = 180.0


def lmcache_available() -> bool:
    """True when the real lmcache package (not this test package) imports."""
    try:
        import lmcache
    except Exception:  # noqa: BLE001 - a broken install (missing dep, bad .so) counts as absent
        return False
    return "site-packages" in (getattr(lmcache, "__file__", "") or "")


def require_lmcache() -> None:
    """Module-level guard of every tests/lmcache module: skip when lmcache is not installed,
    unless CURVINE_REQUIRE_LMCACHE is set (CI): then a missing install fails collection loudly."""
    import pytest

    if lmcache_available():
        return
    if os.environ.get("CURVINE_REQUIRE_LMCACHE"):
        pytest.fail("CURVINE_REQUIRE_LMCACHE is set but `import lmcache` fails: run "
                    "CURVINE_WITH_LMCACHE=1 scripts/setup.sh", pytrace=False)
    pytest.skip("lmcache is not installed (CURVINE_WITH_LMCACHE=1 scripts/setup.sh)",
                allow_module_level=True)


def lmcache_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LMCACHE_")}
    env.update(PYTHONHASHSEED="0", LMCACHE_TRACK_USAGE="false", LMCACHE_DISABLE_BANNER="1",
               LMCACHE_LOG_LEVEL="WARNING", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


# -- non-MP: one engine per process ------------------------------------------------------------

@dataclass(frozen=True)
class Model:
    """KV geometry of the simulated model. The default is tiny (512 KiB per 256-token bf16 chunk)
    so CI stays fast; Llama-3-8B is Model(layers=32, kv_heads=8, head_dim=128) = 32 MiB/chunk."""

    name: str = "curvine-test/tiny"
    layers: int = 4
    kv_heads: int = 2
    head_dim: int = 64
    dtype: str = "bfloat16"
    world_size: int = 1
    worker_id: int = 0

    def chunk_bytes(self, chunk_size: int = 256) -> int:
        itemsize = {"bfloat16": 2, "float16": 2, "float32": 4, "uint8": 1}[self.dtype]
        return 2 * self.layers * chunk_size * self.kv_heads * self.head_dim * itemsize


def engine_config(*, remote_url: str | None = None, plugins: Sequence[str] | None = None,
                  extra_config: Mapping[str, Any] | None = None, local_cpu: bool = True,
                  max_local_cpu_size: float = 0.5, chunk_size: int = 256, remote_serde: str = "naive",
                  **more: Any) -> dict[str, Any]:
    """LMCache config keys (v1/config.py names). `max_local_cpu_size` must stay > 0 even with
    local_cpu=False: remote gets allocate from that buffer. Unknown keys fail in the engine."""
    cfg: dict[str, Any] = {"chunk_size": chunk_size, "local_cpu": local_cpu,
                           "max_local_cpu_size": max_local_cpu_size, "remote_serde": remote_serde}
    if remote_url is not None:
        cfg["remote_url"] = remote_url
    if plugins is not None:
        cfg["remote_storage_plugins"] = list(plugins)
    if extra_config is not None:
        cfg["extra_config"] = dict(extra_config)
    cfg.update(more)
    return cfg


@dataclass(frozen=True)
class EngineJob:
    """What one engine process does. ops, in order: store, flush, lookup, contains, miss, retrieve
    (see engine_proc.py). `kv_seed` (default: `seed`) seeds the KV bytes, `seed` the token ids:
    a reader with the writer's `seed` but another `kv_seed` must see hits but not bit-exactness."""

    config: Mapping[str, Any]
    ops: Sequence[str]
    tokens: int = 1024
    seed: int = 0
    kv_seed: int | None = None
    model: Model = Model()
    flush_timeout: float = 60.0
    require_remote: bool = True
    barrier_dir: str | None = None   # set by EngineProcess for jobs with "barrier" ops

    def to_json(self) -> str:
        job = asdict(self)
        job["ops"] = list(self.ops)
        job["config"] = dict(self.config)
        return json.dumps(job)


@dataclass(frozen=True)
class EngineResult:
    data: dict[str, Any]
    returncode: int
    stderr: str
    wall_seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.data.get("ok"))

    def op(self, name: str) -> dict[str, Any]:
        """The last result of op `name`."""
        for entry in reversed(self.data.get("ops", [])):
            if entry["op"] == name:
                return dict(entry)
        raise KeyError(f"op {name!r} did not run: {self.data}")

    def describe(self) -> str:
        return f"rc={self.returncode} result={self.data}\n--- stderr tail ---\n{_tail(self.stderr)}"


def run_engine(job: EngineJob, *, prefix: Sequence[str] = (), env: Mapping[str, str] | None = None,
               timeout: float = DEFAULT_TIMEOUT, check: bool = True) -> EngineResult:
    """Runs one engine process (optionally under `prefix`, e.g. ["ip", "netns", "exec", "ns0"])
    and returns its JSON report. With `check`, a failed run raises AssertionError with the log."""
    argv = [*prefix, PYTHON, "-m", "tests.lmcache.engine_proc", job.to_json()]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, check=False, cwd=REPO_ROOT, env=lmcache_env(env), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    data: dict[str, Any] = json.loads(lines[-1]) if lines else {"ok": False, "error": "no JSON line"}
    result = EngineResult(data, proc.returncode, proc.stderr, wall)
    if check and not result.ok:
        raise AssertionError(f"engine process failed: {result.describe()}")
    return result


class EngineProcess:
    """An engine process the test interacts with while it runs (`run_engine` only waits for the
    end): its job's "barrier" ops stop it until `release(n)`, so a test can, say, kill -9 and
    restart a server between two ops of ONE engine (whose connections must then recover).

        with EngineProcess(EngineJob(cfg, ["retrieve", "barrier", "retrieve"])) as engine:
            engine.wait_barrier(1); restart_something(); engine.release(1)
            result = engine.result()
    """

    def __init__(self, job: EngineJob, *, prefix: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 timeout: float = DEFAULT_TIMEOUT, start: bool = True) -> None:
        self._start_on_enter = start
        self._dir = pathlib.Path(tempfile.mkdtemp(prefix="curvine-engine-"))
        self.job = EngineJob(**{**asdict(job), "model": job.model, "barrier_dir": str(self._dir)})
        self._prefix = list(prefix)
        self._env = env
        self._timeout = timeout
        self._deadline = 0.0
        self._proc: subprocess.Popen[str] | None = None
        self._t0 = 0.0

    def start(self) -> Self:
        self._t0 = time.perf_counter()
        self._deadline = time.monotonic() + self._timeout
        with open(self._dir / "stderr", "w") as stderr:
            self._proc = subprocess.Popen(
                [*self._prefix, PYTHON, "-m", "tests.lmcache.engine_proc", self.job.to_json()], cwd=REPO_ROOT,
                env=lmcache_env(self._env), stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                text=True, start_new_session=True)
        return self

    def wait_barrier(self, number: int) -> list[dict[str, Any]]:
        """Waits until the engine reached its `number`th barrier; returns the ops it has done."""
        assert self._proc is not None
        marker = self._dir / f"reached-{number}"
        while not marker.exists():
            if self._proc.poll() is not None:
                raise AssertionError(f"engine exited before barrier {number}: {self.result(check=False).describe()}")
            if time.monotonic() > self._deadline:
                raise TimeoutError(f"engine did not reach barrier {number}:\n{_tail(self._stderr())}")
            time.sleep(0.02)
        done: list[dict[str, Any]] = json.loads(marker.read_text())
        return done

    def release(self, number: int) -> None:
        (self._dir / f"go-{number}").touch()

    def _stderr(self) -> str:
        try:
            return (self._dir / "stderr").read_text(errors="replace")
        except OSError:
            return ""

    def result(self, *, check: bool = True) -> EngineResult:
        assert self._proc is not None
        try:
            stdout, _ = self._proc.communicate(timeout=max(1.0, self._deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        data: dict[str, Any] = json.loads(lines[-1]) if lines else {"ok": False, "error": "no JSON line"}
        result = EngineResult(data, self._proc.returncode, self._stderr(), time.perf_counter() - self._t0)
        if check and not result.ok:
            raise AssertionError(f"engine process failed: {result.describe()}")
        return result

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()

    def __enter__(self) -> Self:
        """Starts the engine, unless constructed with start=False (then call start() later)."""
        return self.start() if self._start_on_enter else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)


def store_and_retrieve(config: Mapping[str, Any], *, reader_config: Mapping[str, Any] | None = None,
                       tokens: int = 1024, seed: int = 0, model: Model = Model(),
                       writer_prefix: Sequence[str] = (), reader_prefix: Sequence[str] = (),
                       env: Mapping[str, str] | None = None,
                       timeout: float = DEFAULT_TIMEOUT) -> tuple[EngineResult, EngineResult]:
    """Process A stores `tokens` tokens and waits for its remote puts; a fresh process B, with the
    local CPU tier off (so every hit comes from the remote), looks up unknown tokens ("miss"),
    then looks them up and retrieves them.
    Both results are checked to have run; the caller asserts hits and bit-exactness."""
    writer = run_engine(EngineJob(config, ["store", "flush", "lookup"], tokens, seed, model=model),
                        prefix=writer_prefix, env=env, timeout=timeout)
    rcfg = dict(reader_config if reader_config is not None else config)
    rcfg["local_cpu"] = False
    reader = run_engine(EngineJob(rcfg, ["miss", "lookup", "retrieve"], tokens, seed, model=model),
                        prefix=reader_prefix, env=env, timeout=timeout)
    return writer, reader


# -- background servers ------------------------------------------------------------------------

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
    and simply sees a client that disconnects."""

    name = "lmserver"

    @property
    def url(self) -> str:
        return f"lm://{self.host}:{self.port}"

    def argv(self) -> list[str]:
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
    """`python -m lmcache.v1.basic_check --mode test_l2_adapter`: absent lookup, store, lookup,
    load + content check. It always exits 0, so `ok` comes from its 'Validation: n/n' lines
    (metrics['validations'] = [[label, passed, total], ...]); all four phases must pass."""
    proc, wall = _run_tool([PYTHON, "-m", "lmcache.v1.basic_check", "--mode", "test_l2_adapter",
                            "--num-keys", str(num_keys), "--l2-adapter", json.dumps(dict(adapter))],
                           prefix=prefix, env=env, timeout=timeout)
    found = _validations(proc.stdout)
    ok = proc.returncode == 0 and _all_validations_pass(found)
    return ToolResult(proc.returncode, proc.stdout, proc.stderr, wall, {"validations": found}, ok)


def run_remote_basic_check(remote_url: str, *, num_keys: int = 5, prefix: Sequence[str] = (),
                           env: Mapping[str, str] | None = None,
                           timeout: float = DEFAULT_TIMEOUT) -> ToolResult:
    """`python -m lmcache.v1.basic_check --mode test_remote` against a non-MP remote URL (config via
    LMCACHE_* env, local CPU tier off): exists (absent), put, exists, get + content check.
    metrics['validations'] as in run_l2_basic_check; metrics['ms'] = {operation: avg ms} from its
    table (e.g. 'GET': 0.6)."""
    extra = {"LMCACHE_REMOTE_URL": remote_url, "LMCACHE_CHUNK_SIZE": "256",
             "LMCACHE_LOCAL_CPU": "False", "LMCACHE_MAX_LOCAL_CPU_SIZE": "1",
             "LMCACHE_REMOTE_SERDE": "naive", **(env or {})}
    proc, wall = _run_tool([PYTHON, "-m", "lmcache.v1.basic_check", "--mode", "test_remote",
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
    "ToolResult", "engine_config", "free_port", "lmcache_available", "lmcache_env", "require_lmcache",
    "run_engine", "run_l2_basic_check", "run_l2_bench", "run_remote_basic_check", "run_server_bench", "servers",
    "store_and_retrieve",
]
