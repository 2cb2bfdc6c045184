"""Fuzzed connections against a real worker process (issue 11): tests/unit/test_wire_fuzz.py drives
the decoders sans-IO and an in-process data-plane server; here the same mutated data-plane frames
and mutated lm:// requests go to a worker started as its own process (both ports, token-less, a
1 MiB payload cap), each case on its own connection, half-closed after its bytes. After every case
the server has answered or closed (never hangs: the header deadline is 1 s); every few cases a
well-behaved client still reads what it stored through both ports; at the end the process is alive
and its RSS is within 16 MiB of what it was after the first cases (no allocation sized by a claimed
length, nothing kept per dead connection).

Cases: CURVINE_FUZZ_CASES / 20 per port (default 1,000 each)."""
from __future__ import annotations

import os
import random
import socket
import struct
from collections.abc import Iterator

import psutil
import pytest

from curvine_py.core import lmproto
from curvine_py.transport.blocking import recv_exactly
from tests.harness import Cluster
from tests.unit.test_wire_fuzz import mutate, valid_frames

CASES = max(200, int(os.environ.get("CURVINE_FUZZ_CASES", "20000")) // 20)
MAX_PAYLOAD = 1 << 20
CHECK_EVERY = 100
WARM_UP_CASES = 100
RSS_SLACK = 16 << 20
WORKER_ARGS = ["--lm-port", "-1", "--max-payload", str(MAX_PAYLOAD), "--header-timeout-s", "1"]
KEPT = b"kept bytes " * 100


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("fuzz"), workers=1, worker_args=WORKER_ARGS) as c:
        c.wait_for_live_workers(1)
        c.client().kv.put("kept", KEPT)
        yield c


def address(field: str, cluster: Cluster) -> tuple[str, int]:
    worker = cluster.workers[0]
    assert worker is not None
    value = worker.address if field == "data" else worker.field("lm")
    host, port = value.rsplit(":", 1)
    return host, int(port)


def rss(cluster: Cluster) -> int:
    worker = cluster.workers[0]
    assert worker is not None and worker.alive()
    return int(psutil.Process(worker.process.pid).memory_info().rss)


def send_case(target: tuple[str, int], data: bytes, case: int) -> None:
    """Sends one case and reads until the server closes (a half-sent frame ends at its deadline)."""
    with socket.create_connection(target, timeout=10) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except TimeoutError:
            pytest.fail(f"case {case}: the worker neither answered nor closed: {data[:64].hex()}")
        except OSError:   # reset, broken pipe: the server closed first
            pass


def lm_case(rng: random.Random) -> bytes:
    command = rng.choice(list(lmproto.Command))
    length = rng.randrange(64) if command is lmproto.Command.PUT else 0
    meta = lmproto.ObjectMeta(length, lmproto.MemoryFormat.KV_2LTD, lmproto.Dtype.BFLOAT16, (1, 2, 3, 4))
    raw = bytearray(lmproto.encode_request(command, f"fuzz{rng.randrange(99)}", meta if length else None)
                    + rng.randbytes(length))
    match rng.randrange(4):
        case 0:
            for _ in range(rng.randrange(1, 8)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
        case 1:   # absurd length claims (a 2 GiB PUT among them)
            struct.pack_into("<i", raw, 4, rng.choice([-1, 2**31 - 1, MAX_PAYLOAD + 1]))
        case 2:
            del raw[rng.randrange(len(raw) + 1):]
        case _:
            raw = bytearray(rng.randbytes(rng.randrange(400)))
    return bytes(raw)


def lm_get(target: tuple[str, int], key: str) -> bytes | None:
    with socket.create_connection(target, timeout=10) as sock:
        sock.sendall(lmproto.encode_request(lmproto.Command.GET, key))
        reply = lmproto.parse_reply(recv_exactly(sock, lmproto.REPLY_SIZE))
        return recv_exactly(sock, reply.meta.length) if reply.ok else None


def test_the_data_port_of_a_worker_process_survives_fuzzed_frames(cluster: Cluster) -> None:
    rng = random.Random(21)
    target = address("data", cluster)
    reader = cluster.client()
    level = 0
    for case in range(CASES):
        send_case(target, mutate(rng, valid_frames(rng)), case)
        if case == WARM_UP_CASES:
            level = rss(cluster)
        if case % CHECK_EVERY == 0:
            assert reader.kv.get("kept") == KEPT, f"after case {case}"
    assert reader.kv.get("kept") == KEPT
    assert rss(cluster) <= level + RSS_SLACK, (level, rss(cluster))


def test_the_lm_port_of_a_worker_process_survives_fuzzed_requests(cluster: Cluster) -> None:
    rng = random.Random(22)
    target = address("lm", cluster)
    meta = lmproto.ObjectMeta(len(KEPT), lmproto.MemoryFormat.BINARY, lmproto.Dtype.UINT8, (len(KEPT), 0, 0, 0))
    with socket.create_connection(target, timeout=10) as sock:
        sock.sendall(lmproto.encode_request(lmproto.Command.PUT, "lm-kept", meta) + KEPT)
        sock.sendall(lmproto.encode_request(lmproto.Command.HEALTH, ""))    # PUT has no reply: HEALTH orders it
        assert recv_exactly(sock, lmproto.REPLY_SIZE) == lmproto.SUCCESS_REPLY
    level = 0
    for case in range(CASES):
        send_case(target, lm_case(rng), case)
        if case == WARM_UP_CASES:
            level = rss(cluster)
        if case % CHECK_EVERY == 0:
            assert lm_get(target, "lm-kept") == KEPT, f"after case {case}"
    assert lm_get(target, "lm-kept") == KEPT
    assert cluster.client().kv.get("kept") == KEPT, "the data port serves on"
    assert rss(cluster) <= level + RSS_SLACK, (level, rss(cluster))
