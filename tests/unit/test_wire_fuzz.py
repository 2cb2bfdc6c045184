"""Fuzz of the two wire decoders (issue 11): mutated and random frames for the data plane
(core/frames.py) and LMCache's lm:// requests (core/lmproto.py), first sans-IO, then against a live
data-plane server on real sockets. Only the decoders' own errors may come out (ProtocolError,
TooLarge), memory stays bounded (no allocation sized by a length field), and the server keeps
serving well-formed clients after every case.

Cases: CURVINE_FUZZ_CASES (default 20,000 for the codec, a tenth of that on the live server);
`CURVINE_FUZZ_CASES=100000` is the bench-size run. Seeded: a failure names its case.
"""
from __future__ import annotations

import os
import pathlib
import random
import socket
import struct
import tracemalloc
from collections.abc import Iterator

import pytest

from curvine_py.core import frames, lmproto
from curvine_py.core.errors import ProtocolError, TooLarge
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.worker.limits import ServerLimits
from curvine_py.worker.server import DataServer, WorkerState
from curvine_py.worker.store import Store
from tests.unit.test_worker_server import WireClient

CASES = int(os.environ.get("CURVINE_FUZZ_CASES", "20000"))
MAX_PAYLOAD = 1 << 20
MEMORY_BOUND = 8 << 20     # peak traced allocation over a whole run: far below any claimed length
Op = frames.Op


def valid_frames(rng: random.Random) -> bytes:
    op = rng.choice(list(Op))
    header = DataHeader(key=f"k{rng.randrange(1000)}", block_id=rng.randrange(1 << 64), length=rng.randrange(64),
                        keys=[f"x{i}" for i in range(rng.randrange(3))], user_meta=rng.randbytes(rng.randrange(8)))
    payload = rng.randbytes(int(header.length)) if op in frames.REQUEST_PAYLOAD_OPS else b""
    return frames.encode(op, rng.randrange(1 << 32), header, len(payload)) + payload


def mutate(rng: random.Random, data: bytes) -> bytes:
    raw = bytearray(data)
    match rng.randrange(6):
        case 0:   # flip bits anywhere
            for _ in range(rng.randrange(1, 6)):
                if raw:
                    raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        case 1:   # truncate
            del raw[rng.randrange(len(raw) + 1):]
        case 2:   # absurd lengths in the prefix
            struct.pack_into("<IQ", raw, 8, rng.choice([0, 1, frames.MAX_HEADER + 1, 2**32 - 1]),
                             rng.choice([0, 1, MAX_PAYLOAD + 1, 2**63, 2**64 - 1]))
        case 3:   # random garbage after a good prefix
            raw[frames.PREFIX_SIZE:] = rng.randbytes(rng.randrange(200))
        case 4:   # pure noise
            raw = bytearray(rng.randbytes(rng.randrange(300)))
        case _:   # a valid frame followed by noise
            raw += rng.randbytes(rng.randrange(50))
    return bytes(raw)


def decode_all(data: bytes) -> int:
    decoder = frames.FrameDecoder(max_payload=MAX_PAYLOAD, expect_response=False)
    decoder.receive(data)
    count = 0
    while decoder.next_frame() is not None:
        count += 1
    return count


def test_the_data_plane_decoder_only_raises_its_own_errors_with_bounded_memory() -> None:
    rng = random.Random(11)
    tracemalloc.start()
    try:
        outcomes = {"decoded": 0, "refused": 0}
        for case in range(CASES):
            data = mutate(rng, valid_frames(rng))
            try:
                decode_all(data)
                outcomes["decoded"] += 1
            except (ProtocolError, TooLarge):
                outcomes["refused"] += 1
            except Exception as exc:   # noqa: BLE001 - the finding is reported with its case
                pytest.fail(f"case {case}: {type(exc).__name__}: {exc} for {data[:64].hex()}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcomes["decoded"] and outcomes["refused"]          # both kinds were exercised
    assert peak < MEMORY_BOUND, peak


def test_the_lm_decoder_only_raises_its_own_errors_with_bounded_memory() -> None:
    rng = random.Random(12)
    tracemalloc.start()
    try:
        refused = 0
        for case in range(CASES):
            command = rng.choice(list(lmproto.Command))
            length = rng.randrange(64) if command is lmproto.Command.PUT else 0
            meta = lmproto.ObjectMeta(length, lmproto.MemoryFormat.KV_2LTD, lmproto.Dtype.BFLOAT16, (1, 2, 3, 4))
            good = lmproto.encode_request(command, f"key{rng.randrange(99)}", meta if length else None)
            raw = bytearray(good + rng.randbytes(length))
            for _ in range(rng.randrange(0, 8)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            if rng.random() < 0.2:
                struct.pack_into("<i", raw, 4, rng.choice([-1, 2**31 - 1, MAX_PAYLOAD + 1]))
            decoder = lmproto.RequestDecoder(max_payload=MAX_PAYLOAD)
            decoder.receive(bytes(raw))
            try:
                while decoder.next_request() is not None:
                    pass
            except (ProtocolError, TooLarge):
                refused += 1
            except Exception as exc:   # noqa: BLE001 - the finding is reported with its case
                pytest.fail(f"case {case}: {type(exc).__name__}: {exc} for {bytes(raw[:64]).hex()}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused and peak < MEMORY_BOUND, (refused, peak)


@pytest.fixture
def server(tmp_path: pathlib.Path) -> Iterator[tuple[str, int]]:
    with Store([(str(tmp_path / "d"), 0)]) as store:
        data = DataServer(store, WorkerState("w1"), host="127.0.0.1", port=0, token="", max_payload=MAX_PAYLOAD,
                          limits=ServerLimits(idle_timeout_s=5, header_timeout_s=0.2, auth_timeout_s=5))
        yield data.start()
        data.stop()


def test_a_live_server_survives_fuzzed_connections_and_keeps_serving(server: tuple[str, int]) -> None:
    rng = random.Random(13)
    with WireClient(server) as good:
        good.put("kept", b"k" * 1000)
        for case in range(max(50, CASES // 10)):
            data = mutate(rng, valid_frames(rng))
            with socket.create_connection(server, timeout=5) as sock:
                try:
                    sock.sendall(data)
                    sock.shutdown(socket.SHUT_WR)        # a half-sent frame ends at the header deadline
                    while sock.recv(65536):
                        pass
                except TimeoutError:
                    pytest.fail(f"case {case}: the server neither answered nor closed: {data[:64].hex()}")
                except OSError:   # reset, broken pipe, not connected: the server closed first
                    pass
            if case % 50 == 0:
                reply, payload = good.get("kept")
                assert reply.found and payload == b"k" * 1000, case
        assert good.call(Op.PING, DataHeader()).errno == 0

