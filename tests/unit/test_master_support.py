"""Helpers shared by the master unit tests: a store on a temp SQLite file with a fake clock."""
from __future__ import annotations

import pathlib

from curvine_py.master.namespace import Namespace
from curvine_py.master.types import ROOT_INO, Attr, FileType, StorageClass, WorkerInfo

MiB = 1 << 20


class FakeClock:
    """Nanosecond wall clock that advances 1 ms per reading (ordering without sleeping), and a
    seconds clock for leases that moves only when told."""

    def __init__(self) -> None:
        self.ns = 1_700_000_000_000_000_000
        self.seconds = 1000.0

    def now_ns(self) -> int:
        self.ns += 1_000_000
        return self.ns

    def monotonic(self) -> float:
        return self.seconds

    def wall_ms(self) -> int:
        return self.ns // 1_000_000

    def advance(self, seconds: float) -> None:
        self.seconds += seconds


def open_store(path: pathlib.Path, clock: FakeClock, **kwargs: object) -> Namespace:
    options: dict[str, object] = {"block_size": 4 * MiB, "clock_ns": clock.now_ns}
    options.update(kwargs)
    return Namespace(str(path / "meta.db"), **options)  # type: ignore[arg-type]


def mkfile(ns: Namespace, name: str, parent: int = ROOT_INO, mode: int = 0o644) -> Attr:
    return ns.create(parent, name, FileType.REGULAR, mode)


def mkdir(ns: Namespace, name: str, parent: int = ROOT_INO) -> Attr:
    return ns.create(parent, name, FileType.DIRECTORY, 0o755)


def worker(worker_id: str, node: str = "", capacity: int = 0) -> WorkerInfo:
    return WorkerInfo(worker_id=worker_id, host="127.0.0.1", port=9000, node=node or f"node-{worker_id}",
                      capacity=capacity, available=capacity)


__all__ = ["FakeClock", "MiB", "StorageClass", "mkdir", "mkfile", "open_store", "worker"]
