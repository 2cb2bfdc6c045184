"""Real FUSE mounts for tests: `curvine-py mount` started as a process (procs.start, waiting for
its `mounted=` ready line), with CURVINE_FUSE_FAIL_FAST=1 so a bug in a handler ends the mount
instead of being answered EIO.

    with Mount(cluster.master_address, tmp_path / "mnt") as mnt:
        (mnt.path / "x").write_bytes(b"...")

`stop()` checks the contract: SIGTERM ends the process with exit code 0 and the mountpoint is no
longer mounted; no handler logged an unexpected error.
"""
from __future__ import annotations

import os
import pathlib
import signal
import subprocess
from collections.abc import Sequence
from typing import Self

from curvine_py.fuse import mountpoint
from curvine_py.procs import RoleProcess, curvine_command, start
from tests.harness import wait_until

FAIL_FAST = {"CURVINE_FUSE_FAIL_FAST": "1"}


class Mount:
    def __init__(self, master: str, path: pathlib.Path | str, *, args: Sequence[str] = (),
                 token: str = "", prefix: Sequence[str] = (), deadline: float = 10.0,
                 env: dict[str, str] | None = None, echo: bool = False) -> None:
        self.master = master
        self.path = pathlib.Path(path)
        self.args = list(args)
        self.token = token
        self.prefix = list(prefix)
        self.deadline = deadline
        self.env = {**FAIL_FAST, **(env or {})}
        self.echo = echo
        if os.environ.get("CURVINE_FUSE_TRACE"):   # debugging: every request and its duration on stderr
            self.args += ["--log-level", "DEBUG"]
            self.echo = True
        self.process: RoleProcess | None = None

    def argv(self) -> list[str]:
        token = ["--token", self.token] if self.token else []
        return [*self.prefix, *curvine_command("mount", "--master", self.master, str(self.path),
                                               "--deadline", str(self.deadline), *token, *self.args)]

    def start(self) -> Mount:
        if mountpoint.state(str(self.path)) == "missing":
            self.path.mkdir(parents=True)
        self.process = start(f"mount:{self.path.name}", self.argv(), ready_prefix="mounted=",
                             env=self.env, echo=self.echo)
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.stop(check=exc_type is None)

    @property
    def log(self) -> str:
        return "\n".join(self.process.tail) if self.process else ""

    def stop(self, *, check: bool = True) -> None:
        process = self.process
        if process is None:
            return
        code = process.stop(timeout=30)
        if mountpoint.is_mounted(str(self.path)):
            subprocess.run(["fusermount3", "-u", "-z", str(self.path)], check=False, capture_output=True)
        self.process = None
        if check:
            assert code == 0, f"mount exited with {code}:\n" + "\n".join(process.tail)
            assert not mountpoint.is_mounted(str(self.path)), "still mounted after SIGTERM"
            assert "unexpected error" not in "\n".join(process.tail), "\n".join(process.tail)

    def kill(self) -> None:
        """kill -9: leaves a stale mountpoint behind (ENOTCONN)."""
        assert self.process is not None
        os.killpg(self.process.process.pid, signal.SIGKILL)
        self.process.process.wait()
        self.process = None

    def wait_unmounted(self, timeout: float = 10.0) -> None:
        wait_until(lambda: not mountpoint.is_mounted(str(self.path)), timeout, f"{self.path} unmounted")


def run_as(uid: int, gid: int, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs a Python snippet as an unprivileged user (setpriv), for permission checks."""
    import sys
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                           sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          check=False)
