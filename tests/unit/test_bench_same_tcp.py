"""bench/lmcache_same_tcp.py's report: both fs:// readers become rows of their own against the same
native get, and short-circuit engagement is counted from `ss` the way the kernel pairs unix ends."""
from __future__ import annotations

from typing import Any

import pytest

from bench import lmcache_same_tcp as bench

SS_LINES = [
    # worker (pid 10) accepted two connections on its short-circuit socket: inodes 101, 103
    'u_str 0 0 /var/tmp/x/worker-data/worker.sock 101 * 201 users:(("python3.11",pid=10,fd=9))',
    'u_str 0 0 /var/tmp/x/worker-data/worker.sock 103 * 203 users:(("python3.11",pid=10,fd=11))',
    # the local mount (pid 20) holds both other ends; the TCP mount (pid 30) only an unrelated pair
    'u_str 0 0 * 201 * 101 users:(("python3.11",pid=20,fd=7))',
    'u_str 0 0 * 203 * 103 users:(("python3.11",pid=20,fd=8))',
    'u_str 0 0 * 301 * 302 users:(("python3.11",pid=30,fd=5))',
    'u_str 0 0 /run/other.sock 302 * 301 users:(("other",pid=40,fd=3))',
    'u_dgr 0 0 * 401 * 101 users:(("python3.11",pid=30,fd=6))',
]
SS = "\n".join(SS_LINES)


def test_count_links_pairs_each_connecting_end_with_the_workers_accepted_end() -> None:
    assert bench.count_links(SS, client_pid=20, server_pid=10) == 2
    assert bench.count_links(SS, client_pid=30, server_pid=10) == 0   # datagram and other sockets ignored
    assert bench.count_links(SS, client_pid=20, server_pid=40) == 0   # not a worker.sock
    assert bench.count_links("", client_pid=20, server_pid=10) == 0


def _reads(cold: float, warm: float) -> dict[str, float]:
    return {"cold_s": cold, "warm_s": warm}


def _counters(reads: float, blocks: float) -> dict[str, float]:
    return {'mount:curvine_mount_requests_total{op="read"}': reads,
            'mount:curvine_sent_bytes_total{way="mount"}': reads * 1024 * 1024,
            'mount:curvine_mount_request_duration_seconds_sum{op="read"}': reads * 0.001,
            'worker:curvine_operation_duration_seconds_count{op="read_block"}': blocks,
            'worker:curvine_operation_duration_seconds_sum{op="read_block"}': blocks * 0.0002}


def _payload(fs: dict[str, Any]) -> dict[str, Any]:
    """What bench.render takes, around one summary's fs part."""
    return {"summary": {"same_tcp": {}, "fs": fs}, "parameters": {"count": 8, "repeats": 3},
            "machine": {"date": "d", "cpus": 2, "cpu": "c", "memory_gib": 1, "kernel": "k", "python": "p",
                        "commit": "abc", "loadavg_at_start": [1.0]}}


def test_both_readers_are_rows_against_the_same_native_get() -> None:
    part_b: dict[str, Any] = {
        "chunk_bytes": 1 << 20, "count": 8,
        "backends": {"native": [{"batched_s": 1.0}, {"batched_s": 2.0}, {"batched_s": 1.0}],
                     "fs_read": [_reads(4.0, 1.0), _reads(8.0, 2.0), _reads(4.0, 1.0)],       # 0.25x, 1x
                     "fs_local": [_reads(1.6, 0.5), _reads(3.2, 1.0), _reads(1.6, 0.5)]},    # 0.625x, 2x
        "read_counters": {"fs_read/cold": [_counters(264, 78)] * 3, "fs_read/warm": [_counters(0, 0)] * 3,
                          "fs_local/cold": [_counters(264, 25)] * 3, "fs_local/warm": [_counters(3, 0)] * 3},
        "unix_links": {"fs_read": 0, "fs_local": 2},
    }
    fs = bench.summarize([], part_b)["fs"]
    tcp, local = fs["readers"]["fs_read"], fs["readers"]["fs_local"]
    assert (tcp["cold_ratio"], tcp["warm_ratio"]) == (0.25, 1.0)
    assert (local["cold_ratio"], local["warm_ratio"]) == (0.625, 2.0)
    assert (tcp["where"]["block_reads"], local["where"]["block_reads"]) == (78, 25)
    assert (tcp["unix_links"], local["unix_links"], local["warm_fuse_reads"]) == (0, 2, 3)
    payload = _payload(fs)
    text = bench.render(payload)
    rows = {tuple(cell.strip() for cell in line.split("|")[1:3]): line.split("|")[4].strip()
            for line in text.splitlines() if line.startswith("| `fs://`")}
    assert rows == {
        ("`fs://`, reader on another node (TCP)", "cold (first read on the node)"): "0.25x (target >= 0.5x: **missed**)",
        ("`fs://`, reader on another node (TCP)", "warm (second read, unchanged chunks)"): "1.00x (target >= 1x: met)",
        ("`fs://`, reader on the owner's node (short-circuit)", "cold (first read on the node)"):
            "0.62x (target >= 0.5x: met)",
        ("`fs://`, reader on the owner's node (short-circuit)", "warm (second read, unchanged chunks)"):
            "2.00x (target >= 1x: met)",
    }
    assert "2 unix connection(s) from this mount" in text and "3 FUSE reads reached it during a warm read" in text


def test_the_plain_directory_is_a_ceiling_row_and_each_mount_warm_read_is_set_against_it() -> None:
    part_b: dict[str, Any] = {
        "chunk_bytes": 1 << 20, "count": 8,
        "backends": {"native": [{"batched_s": 1.0}] * 3,
                     "fs_read": [_reads(4.0, 1.5)] * 3,
                     "fs_plain": [_reads(2.0, 1.2)] * 3},
        "read_counters": {},
    }
    fs = bench.summarize([], part_b)["fs"]
    assert fs["readers"]["fs_read"]["warm_vs_plain"] == pytest.approx(0.8)
    assert "warm_vs_plain" not in fs["readers"]["fs_plain"]
    payload = _payload(fs)
    rows = {tuple(cell.strip() for cell in line.split("|")[1:3]): line.split("|")[4].strip()
            for line in bench.render(payload).splitlines() if line.startswith("| `fs://`")}
    plain = "`fs://`, a plain local directory, no FUSE (the connector's ceiling)"
    assert rows[(plain, "cold (from the disk: page cache dropped)")] == "0.50x"
    assert rows[(plain, "warm (from the page cache)")] == "0.83x"
    assert rows[("`fs://`, reader on another node (TCP)", "warm (second read, unchanged chunks)")] == \
        "0.67x (target >= 1x: **missed**); 0.80x the plain directory's warm read"
