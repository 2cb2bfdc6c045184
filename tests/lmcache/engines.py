"""The hermetic environment for REAL LMCache 0.5.6 processes and the engine side: an LMCache engine
per process (engine_proc.py) given a job, its result, and the store-then-retrieve pair (harness.py
describes the whole kit and re-exports these names)."""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Self

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
PYTHON = sys.executable
# The `lmcache` console script of the running interpreter's venv, run by that interpreter.
_CLI_SCRIPT = pathlib.Path(PYTHON).with_name("lmcache")
LMCACHE_CLI = ([PYTHON, str(_CLI_SCRIPT)] if _CLI_SCRIPT.exists()
               else [PYTHON, "-c", "import sys; from lmcache.cli.main import main; sys.exit(main())"])
DEFAULT_TIMEOUT = 180.0


def lmcache_version() -> str | None:
    """The version of the real lmcache package that imports ('0.5.6', '0.5.7rc2'; from an overlay
    directory on PYTHONPATH too, scripts/test-lmcache-next.sh), None when it does not import."""
    try:
        import lmcache

        from curvine_py.lmcache.compat import lmcache_version_string
    except Exception:  # noqa: BLE001 - a broken install (missing dep, bad .so) counts as absent
        return None
    where = pathlib.Path(getattr(lmcache, "__file__", None) or "/").resolve()
    if where.is_relative_to(REPO_ROOT / "tests"):   # a package of our own shadowing it
        return None
    try:
        return lmcache_version_string()
    except Exception:  # noqa: BLE001 - no _version module: not a real LMCache install
        return None


def lmcache_available() -> bool:
    """True when the real lmcache package (not this test package) imports."""
    return lmcache_version() is not None


def has_lm_protocol() -> bool:
    """The installed LMCache still has its lm:// client and server (<= 0.5.6)."""
    from curvine_py.lmcache.compat import has_lm_protocol as has

    return lmcache_available() and has()


def require_lm_protocol() -> None:
    """Skips a test that needs LMCache's own lm:// client or server on LMCache >= 0.5.7, which
    removed both; the worker's lm:// port itself is tested with 0.5.6 (the locked default)."""
    import pytest

    if not has_lm_protocol():
        pytest.skip(f"LMCache {lmcache_version()} has no lm:// client/server (removed in 0.5.7): "
                    "lm:// is tested with LMCache <= 0.5.6")


def require_lmcache() -> None:
    """Module-level guard of every tests/lmcache module: skip when lmcache is not installed,
    unless CURVINE_REQUIRE_LMCACHE is set (CI): then a missing install fails collection loudly.
    A value other than 1 is the version that must import (scripts/test-lmcache-next.sh sets it)."""
    import pytest

    wanted = os.environ.get("CURVINE_REQUIRE_LMCACHE", "")
    found = lmcache_version()
    if found is not None:
        if wanted not in ("", "1") and found != wanted:
            pytest.fail(f"CURVINE_REQUIRE_LMCACHE={wanted} but lmcache {found} imports", pytrace=False)
        return
    if wanted:
        pytest.fail("CURVINE_REQUIRE_LMCACHE is set but `import lmcache` fails: run "
                    "CURVINE_WITH_LMCACHE=1 scripts/setup.sh", pytrace=False)
    pytest.skip("lmcache is not installed (CURVINE_WITH_LMCACHE=1 scripts/setup.sh)",
                allow_module_level=True)


def basic_check_module() -> str:
    """`python -m` name of LMCache's basic_check (moved under lmcache.inprocess in 0.5.7)."""
    from curvine_py.lmcache.compat import inprocess_module_name

    return inprocess_module_name("basic_check")


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
