"""Per-connection KV counts (observe/tally.py) reach the worker's counters at every scrape and when
the connection ends, each request exactly once."""
from __future__ import annotations

import threading

from curvine_py.worker.server import WorkerState


def kv(state: WorkerState, name: str) -> float:
    return state.metrics.registry.get_sample_value(name, {"way": "kv"}) or 0.0


def test_counts_of_an_open_connection_show_at_each_scrape_and_never_twice() -> None:
    state = WorkerState("w")
    tally = state.tallies.open()
    tally.hits += 2
    tally.sent += 4096
    assert kv(state, "curvine_cache_hits_total") == 2        # a scrape folds the live tally
    assert kv(state, "curvine_sent_bytes_total") == 4096
    assert kv(state, "curvine_cache_hits_total") == 2        # a second scrape adds nothing
    tally.hits += 1
    tally.misses += 1
    tally.received += 10
    state.tallies.close(tally)                               # the connection ends: the rest folded
    tally.hits += 100                                        # a closed tally is not read again
    assert kv(state, "curvine_cache_hits_total") == 3
    assert kv(state, "curvine_cache_misses_total") == 1
    assert kv(state, "curvine_received_bytes_total") == 10
    assert state.lookups() == (3, 1)


def test_scrapes_racing_many_connections_lose_nothing() -> None:
    state = WorkerState("w")
    done = threading.Event()

    def scraper() -> None:
        while not done.is_set():
            state.metrics.registry.get_sample_value("curvine_cache_hits_total", {"way": "kv"})

    def connection() -> None:
        tally = state.tallies.open()
        for _ in range(20_000):
            tally.hits += 1
            tally.sent += 3
        state.tallies.close(tally)

    scraping = threading.Thread(target=scraper)
    scraping.start()
    workers = [threading.Thread(target=connection) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.set()
    scraping.join()
    assert kv(state, "curvine_cache_hits_total") == 80_000
    assert kv(state, "curvine_sent_bytes_total") == 240_000
