"""The worker's data plane, in process: a Store in tmp_path, DataServer and ShortCircuitServer on
port 0 / a unix socket, driven by `WireClient` (a minimal sync client of the wire protocol, kept in
the tests on purpose: the real client library lives in curvine_py/client).

`WireClient` is also loaded by tests/integration/test_worker_process.py; bad input and failures are in
test_worker_server_faults.py.
"""
from __future__ import annotations

import errno
import mmap
import os
import socket
import struct
from collections.abc import Iterator
from typing import Any, Self

import pytest

from curvine_py.core import frames, layout
from curvine_py.core.errors import from_errno
from curvine_py.proto.curvine.v1.common_pb2 import CACHE
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.worker.server import DataServer, WorkerState
from curvine_py.worker.shortcircuit import ShortCircuitServer
from curvine_py.worker.store import Store

MiB = 1 << 20
Op = frames.Op


class WireClient:
    """One connection (TCP `(host, port)` or unix socket path); one request at a time."""

    def __init__(self, address: tuple[str, int] | str, *, token: str = "", hello: bool = True,
                 timeout: float = 10.0) -> None:
        if isinstance(address, str):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(address)
        else:
            self.sock = socket.create_connection(address, timeout=timeout)
        self._next = 1
        self.hello_reply: DataHeader | None = None
        if hello:
            self.hello_reply = self.call(Op.HELLO, DataHeader(token=token))

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, op: Op, header: DataHeader, payload: bytes = b"") -> int:
        request_id = self._next
        self._next += 1
        self.sock.sendall(frames.encode(op, request_id, header, len(payload)) + payload)
        return request_id

    def _recv_exactly(self, count: int) -> bytes:
        out = bytearray()
        while len(out) < count:
            chunk = self.sock.recv(count - len(out))
            if not chunk:
                raise ConnectionError(f"closed after {len(out)} of {count} bytes")
            out += chunk
        return bytes(out)

    def receive(self) -> tuple[frames.FramePrefix, DataHeader, bytes]:
        prefix = frames.decode_prefix(self._recv_exactly(frames.PREFIX_SIZE), max_payload=1 << 40,
                                      expect_response=True)
        header = frames.decode_header(self._recv_exactly(prefix.header_length))
        payload = self._recv_exactly(prefix.payload_length) if prefix.payload_length else b""
        return prefix, header, payload

    def receive_into(self, buffer: memoryview) -> tuple[DataHeader, int]:
        """Reply whose payload lands in `buffer` (recv_into, as a real client does)."""
        prefix = frames.decode_prefix(self._recv_exactly(frames.PREFIX_SIZE), max_payload=1 << 40,
                                      expect_response=True)
        header = frames.decode_header(self._recv_exactly(prefix.header_length))
        got = 0
        while got < prefix.payload_length:
            n = self.sock.recv_into(buffer[got:prefix.payload_length])
            if n == 0:
                raise ConnectionError("closed inside payload")
            got += n
        return header, prefix.payload_length

    def raw_reply(self) -> tuple[int, int, DataHeader]:
        """(op code, request id, header) without validating the op (replies to unknown ops)."""
        _, _, code, request_id, header_length, _ = frames.PREFIX.unpack(self._recv_exactly(frames.PREFIX_SIZE))
        return code, request_id, frames.decode_header(self._recv_exactly(header_length))

    def exchange(self, op: Op, header: DataHeader, payload: bytes = b"") -> tuple[DataHeader, bytes]:
        request_id = self.send(op, header, payload)
        prefix, reply, data = self.receive()
        assert prefix.op == op and prefix.request_id == request_id and prefix.is_response
        return reply, data

    def call(self, op: Op, header: DataHeader, payload: bytes = b"") -> DataHeader:
        reply, _ = self.exchange(op, header, payload)
        if reply.errno:
            raise from_errno(reply.errno, reply.message)
        return reply

    # KV / block helpers
    def put(self, key: str, data: bytes, **fields: Any) -> DataHeader:
        header = DataHeader(key=key, length=len(data), checksum=layout.object_checksum(data), **fields)
        return self.call(Op.PUT, header, data)

    def put_with_trailer(self, key: str, data: bytes, digests: list[int] | None = None,
                         op: Op = Op.PUT, **fields: Any) -> DataHeader:
        """A PUT (or WRITE_BLOCK) whose chunk digests follow the payload (DataHeader.digest_trailer);
        `digests` overrides the true ones. Returns the reply, errors included."""
        trailer = frames.encode_trailer(layout.chunk_digests(data) if digests is None else digests)
        header = DataHeader(key=key, length=len(data), digest_trailer=True, **fields)
        reply, _ = self.exchange(op, header, data + trailer)
        return reply

    def get(self, key: str) -> tuple[DataHeader, bytes]:
        reply, data = self.exchange(Op.GET, DataHeader(key=key))
        if reply.errno:
            raise from_errno(reply.errno, reply.message)
        return reply, data

    def exchange_fd(self, op: Op, header: DataHeader) -> tuple[DataHeader, int | None]:
        """Short-circuit: reply header plus the passed file descriptor (None if none)."""
        request_id = self.send(op, header)
        data, fds, _, _ = socket.recv_fds(self.sock, frames.PREFIX_SIZE, 1)
        data += self._recv_exactly(frames.PREFIX_SIZE - len(data))
        prefix = frames.decode_prefix(data, max_payload=0, expect_response=True)
        assert prefix.request_id == request_id and prefix.payload_length == 0
        reply = frames.decode_header(self._recv_exactly(prefix.header_length))
        return reply, (fds[0] if fds else None)


def assert_closed(sock: socket.socket) -> None:
    """The server closed the connection (EOF, or RST when our request bytes were left unread)."""
    sock.settimeout(5)
    try:
        assert sock.recv(1) == b""
    except ConnectionResetError:
        pass


def preadv_all(fd: int, offset: int, length: int) -> bytes:
    buffer = mmap.mmap(-1, max(length, 1))
    view = memoryview(buffer)[:length]
    done = 0
    while done < length:
        n = os.preadv(fd, [view[done:]], offset + done)
        assert n > 0
        done += n
    data = bytes(view)
    view.release()
    buffer.close()
    return data


def client_verifies(payload: bytes, reply: DataHeader) -> bool:
    """What the client library checks: digests of the payload cut in 1 MiB pieces."""
    return list(reply.chunk_checksums) == layout.chunk_digests(payload)


@pytest.fixture
def store(tmp_path: os.PathLike[str]) -> Iterator[Store]:
    with Store([(os.path.join(tmp_path, "d0"), 0)], max_key_bytes=64) as s:
        yield s


@pytest.fixture
def state() -> WorkerState:
    return WorkerState("w-test", epoch=5)


@pytest.fixture
def server(store: Store, state: WorkerState) -> Iterator[tuple[str, int]]:
    srv = DataServer(store, state, host="127.0.0.1", port=0, token="", max_payload=64 * MiB)
    address = srv.start()
    yield address
    srv.stop()


@pytest.fixture
def client(server: tuple[str, int]) -> Iterator[WireClient]:
    with WireClient(server) as c:
        yield c


def test_hello_reports_identity_and_epoch(client: WireClient) -> None:
    assert client.hello_reply is not None
    assert client.hello_reply.worker_id == "w-test" and client.hello_reply.epoch == 5
    assert client.call(Op.PING, DataHeader()).errno == 0


@pytest.mark.parametrize("size", [0, 1, 4096, MiB - 1, MiB, 3 * MiB + 17])
def test_put_get_bit_exact(client: WireClient, size: int) -> None:
    data = os.urandom(size)
    reply = client.put(f"k{size}", data, user_meta=b"fmt=bf16")
    assert reply.found is False and reply.length == size
    got, payload = client.get(f"k{size}")
    assert got.found and payload == data and got.length == size
    assert got.user_meta == b"fmt=bf16"
    assert got.checksum == layout.object_checksum(data) and client_verifies(payload, got)


def test_get_miss_is_not_an_error(client: WireClient) -> None:
    reply, payload = client.get("absent")
    assert reply.errno == 0 and reply.found is False and payload == b""


def test_reput_is_idempotent_and_keeps_the_stored_copy(client: WireClient) -> None:
    client.put("same", b"first")
    again = client.call(Op.PUT, DataHeader(key="same", length=6), b"second")
    assert again.errno == 0 and again.found is True
    assert client.get("same")[1] == b"first"


def test_exists_counts_the_hit_prefix_and_delete(client: WireClient) -> None:
    for key in ("a", "b", "d"):
        client.put(key, key.encode() * 10)
    assert client.call(Op.EXISTS, DataHeader(keys=["a", "b", "c", "d"])).hit_count == 2
    assert client.call(Op.EXISTS, DataHeader(keys=["x", "a"])).hit_count == 0
    assert client.call(Op.DELETE, DataHeader(key="a")).found is True
    assert client.call(Op.DELETE, DataHeader(key="a")).found is False
    assert client.call(Op.EXISTS, DataHeader(keys=["a", "b"])).hit_count == 0


def test_checksum_mismatch_is_eio_and_stores_nothing(client: WireClient, store: Store) -> None:
    reply, _ = client.exchange(Op.PUT, DataHeader(key="bad", checksum=12345), b"x" * 5000)
    assert reply.errno == errno.EIO
    assert client.get("bad")[0].found is False
    assert os.listdir(os.path.join(store.dirs[0].path, "tmp")) == []
    assert client.call(Op.PING, DataHeader()).errno == 0   # the connection is still in sync


@pytest.mark.parametrize("size", [0, 1, MiB, 3 * MiB + 17])
def test_put_with_a_digest_trailer_is_stored_bit_exact(client: WireClient, size: int) -> None:
    data = os.urandom(size)
    reply = client.put_with_trailer(f"t{size}", data, user_meta=b"m")
    assert reply.errno == 0 and reply.found is False and reply.length == size
    got, payload = client.get(f"t{size}")
    assert got.found and payload == data and got.user_meta == b"m"
    assert got.checksum == layout.object_checksum(data) and client_verifies(payload, got)


@pytest.mark.parametrize("bad_chunk", [0, 1, 3])
def test_a_payload_that_fails_its_trailer_is_eio_and_leaves_nothing(client: WireClient, store: Store,
                                                                   bad_chunk: int) -> None:
    data = os.urandom(3 * MiB + 17)   # four chunks: the first, a middle one and the last go bad
    digests = layout.chunk_digests(data)
    digests[bad_chunk] ^= 1
    reply = client.put_with_trailer("bad", data, digests)
    assert reply.errno == errno.EIO and f"chunk {bad_chunk}" in reply.message
    assert client.get("bad")[0].found is False
    assert store.dirs[0].reserved == 0 and os.listdir(os.path.join(store.dirs[0].path, "tmp")) == []
    assert client.put_with_trailer("bad", data).errno == 0   # the stream stayed in sync
    assert client.get("bad")[1] == data


def test_a_trailer_that_does_not_fit_the_payload_is_einval(client: WireClient, store: Store) -> None:
    data = os.urandom(MiB + 1)
    header = DataHeader(key="short", length=len(data), digest_trailer=True)
    reply, _ = client.exchange(Op.PUT, header, data + frames.encode_trailer(layout.chunk_digests(data)[:1]))
    assert reply.errno == errno.EINVAL
    assert client.get("short")[0].found is False
    assert os.listdir(os.path.join(store.dirs[0].path, "tmp")) == []
    assert client.call(Op.PING, DataHeader()).errno == 0


def test_a_reput_with_a_trailer_drains_it(client: WireClient) -> None:
    client.put("again", b"first")
    reply = client.put_with_trailer("again", os.urandom(MiB + 3))
    assert reply.errno == 0 and reply.found is True
    assert client.get("again")[1] == b"first"
    assert client.call(Op.PING, DataHeader()).errno == 0


def test_write_block_with_a_digest_trailer(client: WireClient, store: Store) -> None:
    data = os.urandom(2 * MiB + 5)
    assert client.put_with_trailer("", data, op=Op.WRITE_BLOCK, block_id=0x7A).errno == 0
    reply, payload = client.exchange(Op.READ_BLOCK, DataHeader(block_id=0x7A))
    assert payload == data and client_verifies(payload, reply)
    digests = layout.chunk_digests(data)
    digests[-1] ^= 1
    assert client.put_with_trailer("", data, digests, op=Op.WRITE_BLOCK, block_id=0x7B).errno == errno.EIO
    assert client.exchange(Op.READ_BLOCK, DataHeader(block_id=0x7B))[0].errno == errno.ENOENT
    assert os.listdir(os.path.join(store.dirs[0].path, "tmp")) == []


def test_invalid_keys_are_refused_and_connection_survives(client: WireClient) -> None:
    reply, _ = client.exchange(Op.PUT, DataHeader(key="a\x00b"), b"payload")
    assert reply.errno == errno.EINVAL
    reply, _ = client.exchange(Op.PUT, DataHeader(key="k" * 65), b"payload")
    assert reply.errno == errno.ENAMETOOLONG
    reply, _ = client.exchange(Op.GET, DataHeader(key=""))
    assert reply.errno == errno.EINVAL
    assert client.put("ok", b"fine").errno == 0


def test_length_field_must_match_payload(client: WireClient) -> None:
    reply, _ = client.exchange(Op.PUT, DataHeader(key="k", length=3), b"four")
    assert reply.errno == errno.EINVAL
    assert client.get("k")[0].found is False


def test_stale_epoch_is_estale(client: WireClient) -> None:
    for op, header, payload in ((Op.GET, DataHeader(key="k", epoch=4), b""),
                                (Op.PUT, DataHeader(key="k", epoch=4), b"data"),
                                (Op.EXISTS, DataHeader(keys=["k"], epoch=4), b""),
                                (Op.DELETE, DataHeader(key="k", epoch=4), b"")):
        reply, _ = client.exchange(op, header, payload)
        assert reply.errno == errno.ESTALE, op
    assert client.call(Op.PUT, DataHeader(key="k", epoch=5), b"data").errno == 0
    assert client.call(Op.GET, DataHeader(key="k", epoch=6)).found is True


def test_blocks_write_read_ranges_delete(client: WireClient) -> None:
    data = os.urandom(5 * MiB + 123)
    reply = client.call(Op.WRITE_BLOCK, DataHeader(block_id=0xABC, checksum=layout.object_checksum(data)), data)
    assert reply.length == len(data)
    for offset, length in ((0, 0), (0, len(data)), (MiB, MiB), (2 * MiB, 10), (4 * MiB, 0), (3 * MiB, 1 << 40),
                           (len(data), 0), (100, 5000)):
        got, payload = client.exchange(Op.READ_BLOCK, DataHeader(block_id=0xABC, offset=offset, length=length))
        assert got.errno == 0, got.message
        end = len(data) if length == 0 else min(len(data), offset + length)
        assert payload == data[offset:end] and got.length == end - offset
        assert got.checksum == layout.object_checksum(data)
        assert client_verifies(payload, got), (offset, length)
    reply, _ = client.exchange(Op.READ_BLOCK, DataHeader(block_id=0xABC, offset=len(data) + 1))
    assert reply.errno == errno.EINVAL
    assert client.call(Op.DELETE_BLOCK, DataHeader(block_id=0xABC)).found is True
    reply, _ = client.exchange(Op.READ_BLOCK, DataHeader(block_id=0xABC))
    assert reply.errno == errno.ENOENT


def test_rewriting_a_block_replaces_it(client: WireClient) -> None:
    client.call(Op.WRITE_BLOCK, DataHeader(block_id=7), b"old")
    client.call(Op.WRITE_BLOCK, DataHeader(block_id=7), b"new bytes")
    assert client.exchange(Op.READ_BLOCK, DataHeader(block_id=7))[1] == b"new bytes"


def test_read_of_a_corrupted_block_range_is_eio_and_drops_it(client: WireClient, store: Store) -> None:
    data = os.urandom(2 * MiB)
    client.call(Op.WRITE_BLOCK, DataHeader(block_id=9), data)
    path = os.path.join(store.dirs[0].path, "blocks", layout.shard_dir(layout.block_file_name(9)),
                        layout.block_file_name(9))
    with open(path, "r+b") as fh:
        fh.seek(os.path.getsize(path) - 10)
        fh.write(b"\xff" * 10)
    reply, _ = client.exchange(Op.READ_BLOCK, DataHeader(block_id=9, offset=MiB, length=MiB - 100))
    assert reply.errno == errno.EIO
    assert not store.contains_block(9)
    assert store.take_reports() == ([], [9])


def test_report_bad_drops_only_a_copy_that_fails_verification(client: WireClient, store: Store) -> None:
    client.put("good", b"g" * 3000)
    assert client.call(Op.REPORT_BAD, DataHeader(key="good")).found is False
    assert client.get("good")[0].found
    client.put("rotten", b"r" * 3000)
    path = os.path.join(store.dirs[0].path, "kv", layout.shard_dir(layout.object_file_name("rotten")),
                        layout.object_file_name("rotten"))
    with open(path, "r+b") as fh:
        fh.seek(-1, os.SEEK_END)
        fh.write(b"X")
    assert client.call(Op.REPORT_BAD, DataHeader(key="rotten")).found is True
    assert client.get("rotten")[0].found is False


def test_delete_while_a_read_is_in_flight(client: WireClient, server: tuple[str, int], store: Store) -> None:
    data = os.urandom(32 * MiB)
    client.put("streamed", data)
    with WireClient(server) as reader:
        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        reader.send(Op.GET, DataHeader(key="streamed"))
        first = reader.sock.recv(4096)          # the reply has started
        assert client.call(Op.DELETE, DataHeader(key="streamed")).found is True
        rest = bytearray(first)
        expected_total = None
        while expected_total is None or len(rest) < expected_total:
            chunk = reader.sock.recv(1 << 20)
            assert chunk
            rest += chunk
            if expected_total is None and len(rest) >= frames.PREFIX_SIZE:
                _, _, _, _, hlen, plen = frames.PREFIX.unpack(bytes(rest[:frames.PREFIX_SIZE]))
                expected_total = frames.PREFIX_SIZE + hlen + plen
        assert bytes(rest[-len(data):]) == data
    assert client.get("streamed")[0].found is False


def test_pipelined_requests_are_answered_in_order(client: WireClient) -> None:
    ids = [client.send(Op.PUT, DataHeader(key=f"p{i}"), bytes([i]) * 100) for i in range(20)]
    ids += [client.send(Op.GET, DataHeader(key=f"p{i}")) for i in range(20)]
    replies = [client.receive() for _ in ids]
    assert [p.request_id for p, _, _ in replies] == ids
    assert [payload for _, _, payload in replies[20:]] == [bytes([i]) * 100 for i in range(20)]


def test_recv_into_aligned_buffer(client: WireClient) -> None:
    data = os.urandom(14 * MiB)
    client.put("big", data)
    buffer = mmap.mmap(-1, 16 * MiB)
    view = memoryview(buffer)
    client.send(Op.GET, DataHeader(key="big"))
    header, n = client.receive_into(view)
    assert header.found and n == len(data) and view[:n] == data
    view.release()
    buffer.close()


# -- short-circuit -------------------------------------------------------------------------------


@pytest.fixture
def unix_path(store: Store, state: WorkerState) -> Iterator[str]:
    sc = ShortCircuitServer(store, state, path=os.path.join(store.dirs[0].path, "worker.sock"), token="t",
                            max_payload=64 * MiB)
    path = sc.start()
    yield path
    sc.stop()
    assert not os.path.exists(path)


def test_short_circuit_socket_is_private(unix_path: str) -> None:
    assert os.stat(unix_path).st_mode & 0o777 == 0o600


def test_short_circuit_get_passes_the_fd(unix_path: str, client: WireClient) -> None:
    data = os.urandom(3 * MiB + 5)
    client.put("local", data, user_meta=b"m")
    with WireClient(unix_path, token="t") as local:
        reply, fd = local.exchange_fd(Op.GET, DataHeader(key="local"))
        assert fd is not None and reply.found and reply.length == len(data) and reply.user_meta == b"m"
        try:
            assert reply.data_offset % layout.PAGE == 0
            payload = preadv_all(fd, reply.data_offset, reply.length)
        finally:
            os.close(fd)
        assert payload == data and client_verifies(payload, reply)
        assert payload == client.get("local")[1]   # same bytes as over TCP
        reply, fd = local.exchange_fd(Op.GET, DataHeader(key="nope"))
        assert fd is None and reply.found is False and reply.errno == 0
        assert local.call(Op.EXISTS, DataHeader(keys=["local"])).hit_count == 1


def test_short_circuit_read_block_range(unix_path: str, client: WireClient) -> None:
    data = os.urandom(4 * MiB)
    client.call(Op.WRITE_BLOCK, DataHeader(block_id=77, storage_class=CACHE), data)
    with WireClient(unix_path, token="t") as local:
        reply, fd = local.exchange_fd(Op.READ_BLOCK, DataHeader(block_id=77, offset=2 * MiB, length=MiB + 7))
        assert fd is not None
        try:
            payload = preadv_all(fd, reply.data_offset, reply.length)
        finally:
            os.close(fd)
        assert payload == data[2 * MiB:3 * MiB + 7] and client_verifies(payload, reply)
        reply, fd = local.exchange_fd(Op.READ_BLOCK, DataHeader(block_id=78))
        assert fd is None and reply.errno == errno.ENOENT


def test_short_circuit_requires_the_token(unix_path: str) -> None:
    with WireClient(unix_path, hello=False) as local:
        reply, _ = local.exchange(Op.HELLO, DataHeader(token="bad"))
        assert reply.errno == errno.EACCES


def test_short_circuit_fd_outlives_eviction(unix_path: str, client: WireClient, store: Store) -> None:
    data = os.urandom(MiB)
    client.put("evicted", data)
    with WireClient(unix_path, token="t") as local:
        reply, fd = local.exchange_fd(Op.GET, DataHeader(key="evicted"))
        assert fd is not None
        store.evict([store.object_name("evicted")])
        try:
            assert preadv_all(fd, reply.data_offset, reply.length) == data
        finally:
            os.close(fd)


def test_prefix_struct_is_what_the_helper_assumes() -> None:
    assert struct.calcsize("<2sBBIIQ") == frames.PREFIX_SIZE


@pytest.mark.parametrize("size", [100, 3 * MiB])   # a reply sent inline, one sent by sendfile
def test_every_get_of_a_cached_object_answers_what_a_fresh_reply_would(client: WireClient, size: int) -> None:
    """A GET's reply header is encoded once per cached stored file and reused: every GET of it
    carries the header a first one did, and once the key is deleted and put again with other
    bytes and metadata, the new copy's header, never the old one."""
    first = os.urandom(size)
    client.put("memo", first, user_meta=b"one")
    replies = [client.get("memo") for _ in range(3)]
    for header, payload in replies:
        assert payload == first and header.user_meta == b"one" and header.length == size
        assert header.checksum == layout.object_checksum(first) and client_verifies(payload, header)
    assert replies[0][0] == replies[1][0] == replies[2][0]
    assert client.call(Op.DELETE, DataHeader(key="memo")).found
    second = os.urandom(size + 1)
    client.put("memo", second, user_meta=b"two")
    for _ in range(2):
        header, payload = client.get("memo")
        assert payload == second and header.user_meta == b"two" and header.length == size + 1
        assert header.checksum == layout.object_checksum(second) and client_verifies(payload, header)
