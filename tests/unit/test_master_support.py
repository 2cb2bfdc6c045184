"""Helpers shared by the master unit tests: a store with a fake clock, on a temp SQLite file or, while
the `meta_engine` fixture (conftest.py) says so, on a fresh PostgreSQL database per test directory."""
from __future__ import annotations

import pathlib
import sqlite3
from collections.abc import Callable

import psycopg

from curvine_py.master.engine.open import open_namespace
from curvine_py.master.engine.url import parse_meta_url
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


class Engine:
    """Which engine open_store uses: None = SQLite; else a function giving the PostgreSQL URL of
    a test directory (the same database for the same directory, so a reopen finds its state)."""

    pg_url: Callable[[pathlib.Path], str] | None = None


def open_store(path: pathlib.Path, clock: FakeClock, **kwargs: object) -> Namespace:
    options: dict[str, object] = {"block_size": 4 * MiB, "clock_ns": clock.now_ns}
    options.update(kwargs)
    if Engine.pg_url is not None:
        return open_namespace(parse_meta_url(Engine.pg_url(path)), **options)  # type: ignore[arg-type]
    return Namespace(str(path / "meta.db"), **options)  # type: ignore[arg-type]


def on_postgresql() -> bool:
    return Engine.pg_url is not None


def raw_execute(path: pathlib.Path, *statements: str) -> None:
    """SQL on the store's database behind its back (no store open): a state an older master left."""
    if Engine.pg_url is not None:
        with psycopg.connect(Engine.pg_url(path), autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[call-overload]
        return
    raw = sqlite3.connect(path / "meta.db")
    for statement in statements:
        raw.execute(statement)
    raw.commit()
    raw.close()


def mkfile(ns: Namespace, name: str, parent: int = ROOT_INO, mode: int = 0o644) -> Attr:
    return ns.create(parent, name, FileType.REGULAR, mode)


def mkdir(ns: Namespace, name: str, parent: int = ROOT_INO) -> Attr:
    return ns.create(parent, name, FileType.DIRECTORY, 0o755)


def worker(worker_id: str, node: str = "", capacity: int = 0) -> WorkerInfo:
    return WorkerInfo(worker_id=worker_id, host="127.0.0.1", port=9000, node=node or f"node-{worker_id}",
                      capacity=capacity, available=capacity)


__all__ = ["Engine", "FakeClock", "MiB", "StorageClass", "mkdir", "mkfile", "on_postgresql", "open_store",
           "raw_execute", "worker"]
