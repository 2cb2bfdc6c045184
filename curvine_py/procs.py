"""Starting curvine-py role processes and waiting for their ready line (used by `up`, the CSI node
plugin and the tests, so all three start processes the same way).

Resource handling: a process that dies or stays silent past the deadline is killed and its last
output is put in the error, so a failed start says why.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from curvine_py.core.errors import Unavailable


@dataclass
class RoleProcess:
    name: str
    process: subprocess.Popen[str]
    ready: str                                   # the ready line, e.g. "master=127.0.0.1:8995"
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=50))

    @property
    def address(self) -> str:
        """HOST:PORT from a ready line `role=HOST:PORT ...`."""
        return self.ready.split()[0].split("=", 1)[1]

    def field(self, name: str) -> str:
        for token in self.ready.split():
            key, _, value = token.partition("=")
            if key == name:
                return value
        raise KeyError(name)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after `timeout`. Returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        """kill -9: the crash the durability tests need."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def curvine_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "curvine_py.cli.main", *args]


def child_environment(changes: Mapping[str, str | None] | None) -> dict[str, str]:
    """Our environment with `changes` applied (None removes a variable): how secrets reach a
    child (CURVINE_TOKEN), never its argv, which every user can read in /proc/PID/cmdline."""
    environ = dict(os.environ)
    for key, value in (changes or {}).items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    return environ


def start(name: str, argv: Sequence[str], *, ready_prefix: str, timeout: float = 30.0,
          env: Mapping[str, str | None] | None = None, echo: bool = False) -> RoleProcess:
    """Starts `argv` and returns once a stdout line starts with `ready_prefix`. The rest of its
    output keeps being drained (into `tail`, and to our stderr when `echo`) so it never blocks.
    `env`: changes to our environment for the child (None removes a variable)."""
    process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=child_environment(env), start_new_session=True, bufsize=1)
    lines: deque[str] = deque(maxlen=50)
    ready = threading.Event()
    found: list[str] = []

    def drain() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            if echo:
                print(f"[{name}] {line}", file=sys.stderr, flush=True)
            if not found and line.startswith(ready_prefix):
                found.append(line)
                ready.set()
        ready.set()

    threading.Thread(target=drain, name=f"drain-{name}", daemon=True).start()
    ready.wait(timeout)   # set by the ready line, or by EOF when the process dies first
    if not found:
        if process.poll() is None:
            process.kill()
        process.wait()
        output = "\n".join(lines)
        raise Unavailable(f"{name} did not become ready within {timeout:.0f}s "
                          f"(exit code {process.returncode}):\n{output}")
    return RoleProcess(name, process, found[0], lines)
