"""Eviction applied to a real store with an injected clock: TTL, watermarks, durability, pins,
reports for the master."""
from __future__ import annotations

import logging
import pathlib
import time

import pytest

from curvine_py.proto.curvine.v1.common_pb2 import CACHE, DURABLE
from curvine_py.worker.evictor import Evictor
from curvine_py.worker.store import Store

MiB = 1 << 20


class Clock:
    def __init__(self, now: int = 5_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def tick(self, ms: int = 1) -> None:
        self.now += ms


def make(tmp_path: pathlib.Path, capacity: int, clock: Clock) -> tuple[Store, Evictor]:
    store = Store([(str(tmp_path / "d"), capacity)], clock=clock, pin_grace_ms=1000)
    store.open()
    return store, Evictor(store, high=0.8, low=0.5, interval_s=0.05)


def test_ttl_expiry_below_the_watermark(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    store, evictor = make(tmp_path, 100 * MiB, clock)
    store.put_object("short", b"s", ttl_ms=50)
    store.put_object("long", b"l", ttl_ms=10_000)
    store.write_block(3, b"b", storage_class=CACHE, ttl_ms=50)
    assert evictor.run_once() == 0
    clock.tick(50)
    assert evictor.run_once() == 2
    assert store.exists(["long"]) == 1 and store.exists(["short"]) == 0
    assert store.take_reports() == ([3], [])
    assert store.stats().evictions == 2
    store.close()


def test_lru_above_high_down_to_low_and_durable_is_kept(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    store, evictor = make(tmp_path, 20 * MiB, clock)
    store.put_object("durable", b"d" * (4 * MiB), storage_class=DURABLE)
    for i in range(11):
        clock.tick()
        store.put_object(f"c{i}", b"c" * MiB)
    assert evictor.run_once() == 0                       # ~15 MiB of 20: below the high watermark
    clock.tick()
    store.put_object("c11", b"c" * MiB)                  # 16 MiB + headers > 16 MiB (0.8)
    evicted = evictor.run_once()
    used, capacity = store.dirs[0].pressure()
    assert evicted > 0 and used <= 0.5 * capacity
    assert store.exists(["durable"]) == 1
    survivors = [i for i in range(12) if store.exists([f"c{i}"])]
    assert survivors == list(range(12 - len(survivors), 12))   # the oldest went first
    store.close()


def test_pins_protect_for_the_grace_period(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    store, evictor = make(tmp_path, 10 * MiB, clock)
    for i in range(9):
        clock.tick()
        store.put_object(f"k{i}", b"k" * MiB)
    assert store.exists(["k0", "k1"], pin=True) == 2      # the two oldest, pinned
    assert evictor.run_once() > 0
    assert store.exists(["k0", "k1"]) == 2
    assert store.exists(["k2"]) == 0
    clock.tick(1001)                                      # grace period over
    for i in range(9, 13):
        clock.tick()
        store.put_object(f"k{i}", b"k" * MiB)
    evictor.run_once()
    assert store.exists(["k0"]) == 0
    store.close()


def test_durable_data_is_never_evicted_even_when_full(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    store, evictor = make(tmp_path, 4 * MiB, clock)
    store.write_block(1, b"x" * (3 * MiB + MiB // 2))      # unspecified class for a block = durable
    assert evictor.run_once() == 0 and store.contains_block(1)
    store.close()


def test_background_thread_expires_entries(tmp_path: pathlib.Path) -> None:
    real = Store([(str(tmp_path / "real"), 0)], pin_grace_ms=1000)
    real.open()
    background = Evictor(real, high=0.9, low=0.5, interval_s=0.02)
    real.put_object("gone-soon", b"x", ttl_ms=30)
    background.start()
    try:
        deadline = time.monotonic() + 5
        while real.exists(["gone-soon"]) and time.monotonic() < deadline:
            time.sleep(0.01)
        while real.evictions == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert real.evictions == 1
    finally:
        background.stop()
        real.close()


def test_expired_durable_entries_are_removed_and_pinned_ones_wait(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    store, evictor = make(tmp_path, 100 * MiB, clock)
    store.put_object("durable-ttl", b"d", storage_class=DURABLE, ttl_ms=10)
    store.put_object("pinned-ttl", b"p", ttl_ms=10)
    assert store.exists(["pinned-ttl"], pin=True) == 1          # pinned until now + 1000
    clock.tick(10)
    assert evictor.run_once() == 1
    assert store.stats().objects == 1 and store.stats().used > 0
    clock.tick(1000)
    assert evictor.run_once() == 1
    assert store.stats().objects == 0 and store.stats().used == 0
    store.close()


def test_a_rewritten_entry_keeps_its_new_ttl(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    store, evictor = make(tmp_path, 100 * MiB, clock)
    store.write_block(8, b"old", storage_class=CACHE, ttl_ms=10)
    store.write_block(8, b"new", storage_class=CACHE, ttl_ms=10_000)
    clock.tick(10)
    assert evictor.run_once() == 0 and store.contains_block(8)
    clock.tick(10_000)
    assert evictor.run_once() == 1 and not store.contains_block(8)
    store.close()


class Monotonic:
    """A fake monotonic clock in seconds, for the log throttle."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_failing_pass_is_logged_rate_limited_and_the_loop_keeps_running(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    clock, seconds = Clock(), Monotonic()
    store = Store([(str(tmp_path / "d"), 100 * MiB)], clock=clock)
    store.open()
    evictor = Evictor(store, high=0.8, low=0.5, clock=seconds, log_interval_s=10)

    def broken() -> tuple[int, int]:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(store.dirs[0], "disk", broken)
    caplog.set_level(logging.INFO, logger="curvine_py.worker.evictor")
    for _ in range(240):                  # 30 s of passes every 125 ms, all failing
        assert evictor.tick() == 0
        seconds.now += 0.125
    failed = [r for r in caplog.records if "eviction pass failed" in r.getMessage()]
    assert evictor.failures == 240 and len(failed) == 3          # at 0 s, 10 s, 20 s: not 240 lines
    assert "79 similar lines suppressed" in failed[-1].getMessage() and failed[0].exc_info is not None
    monkeypatch.undo()                    # the disk is back: the next pass works and says so
    store.put_object("ttl", b"x", ttl_ms=5)
    clock.tick(5)
    assert evictor.tick() == 1 and evictor.failures == 0
    assert any("work again after 240" in r.getMessage() for r in caplog.records)
    assert store.exists(["ttl"]) == 0
    store.close()
