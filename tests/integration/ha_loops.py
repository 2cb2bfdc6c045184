"""Write-read loops through a client and a mount while masters fail over (test_standby_masters.py,
test_hung_leader.py): what each way acknowledged, when, what failed and how long each failure took."""
from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from curvine_py.client import CurvineClient
from curvine_py.core.errors import CurvineError
from tests.harness import random_bytes

KiB = 1024
Write = Callable[[str, bytes], None]
Read = Callable[[str], bytes]


@dataclass
class Loop:
    """Creates, writes and reads files through one way (client or mount)."""

    name: str
    acknowledged: dict[str, bytes] = field(default_factory=dict)
    acked_at: list[float] = field(default_factory=list)   # when each acknowledged write ended
    failures: list[tuple[float, str]] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    done: int = 0                                         # writes acknowledged and read back

    def first_ack_after(self, t: float) -> float | None:
        return next((at - t for at in self.acked_at if at > t), None)


def run_loop(loop: Loop, directory: str, write: Write, read: Read, stop: threading.Event) -> None:
    i = 0
    while not stop.is_set():
        path = f"{directory}/{loop.name}-{i}"
        data = random_bytes(4 * KiB + i, seed=i)
        started = time.monotonic()
        try:
            write(path, data)
            loop.acknowledged[path] = data
            loop.acked_at.append(time.monotonic())
            if read(path) != data:
                loop.wrong.append(path)
            loop.done += 1
        except (CurvineError, OSError) as exc:
            loop.failures.append((time.monotonic() - started, f"{type(exc).__name__}: {exc}"))
            time.sleep(0.05)
        i += 1


def start_loops(client: CurvineClient, root: pathlib.Path, directory: str, loops: tuple[Loop, Loop],
                stop: threading.Event) -> list[threading.Thread]:
    """Starts loops[0] through the client and loops[1] through the mount at `root`, in `directory`."""

    def client_write(path: str, data: bytes) -> None:
        with client.fs.open(path, "wb") as f:
            f.write(data)

    def client_read(path: str) -> bytes:
        with client.fs.open(path, "rb") as f:
            return f.read()

    def mount_write(path: str, data: bytes) -> None:
        (root / path.lstrip("/")).write_bytes(data)

    def mount_read(path: str) -> bytes:
        return (root / path.lstrip("/")).read_bytes()

    threads = [threading.Thread(target=run_loop, args=(loops[0], directory, client_write, client_read, stop)),
               threading.Thread(target=run_loop, args=(loops[1], directory, mount_write, mount_read, stop))]
    for thread in threads:
        thread.start()
    return threads
