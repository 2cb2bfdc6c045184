"""The worker as a real process next to a real master: the wire protocol end to end, restart after
kill -9, a full disk, garbage on the wire, keys, short-circuit reads, auth, readiness and exit."""
from __future__ import annotations

import errno
import os
import pathlib
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from curvine_py.core import frames, layout
from curvine_py.procs import curvine_command, start
from curvine_py.proto.curvine.v1.common_pb2 import CACHE, DURABLE
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.worker.recycle import FREED_SUFFIX
from tests.harness import Cluster, random_bytes, wait_until
from tests.unit.test_worker_server import WireClient, assert_closed, client_verifies, preadv_all

MiB = 1 << 20
KiB = 1 << 10
Op = frames.Op
WORKER_ARGS = ["--max-payload", "80MiB", "--max-key-bytes", "100"]


def half_written(tmp_dir: pathlib.Path) -> list[str]:
    """What tmp/ holds besides the empty temp files the worker creates ahead of writes
    (worker/tmpfiles.py) and the whole freed files it keeps for reuse (worker/recycle.py):
    leftovers of a crash or of a failed write."""
    return [p.name for p in tmp_dir.iterdir()
            if not p.name.endswith(FREED_SUFFIX) and (p.stat().st_size or not p.name.endswith(".tmp"))]


def address_of(cluster: Cluster, index: int = 0) -> tuple[str, int]:
    host, port = cluster.workers[index].address.rsplit(":", 1)   # type: ignore[union-attr]
    return host, int(port)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("wp"), workers=1, worker_args=WORKER_ARGS) as c:
        yield c


@pytest.mark.parametrize("size", [KiB, MiB + 1, 14 * MiB, 64 * MiB])
def test_put_get_exists_delete_bit_exact(cluster: Cluster, size: int) -> None:
    data = random_bytes(size, seed=size)
    key = f"obj-{size}"
    with WireClient(address_of(cluster)) as c:
        assert c.put(key, data).found is False
        assert c.call(Op.EXISTS, DataHeader(keys=[key, "missing"])).hit_count == 1
        reply, payload = c.get(key)
        assert reply.found and payload == data and client_verifies(payload, reply)
        assert reply.checksum == layout.object_checksum(data)
        assert c.call(Op.DELETE, DataHeader(key=key)).found is True
        assert c.get(key)[0].found is False


def test_bad_keys_are_refused(cluster: Cluster) -> None:
    with WireClient(address_of(cluster)) as c:
        reply, _ = c.exchange(Op.PUT, DataHeader(key="nul\x00key"), b"v")
        assert reply.errno == errno.EINVAL
        reply, _ = c.exchange(Op.PUT, DataHeader(key="k" * 101), b"v")
        assert reply.errno == errno.ENAMETOOLONG
        reply, _ = c.exchange(Op.EXISTS, DataHeader(keys=["ok", "x" * 101]))
        assert reply.errno == errno.ENAMETOOLONG
        assert c.put("k" * 100, b"v").errno == 0


def test_garbage_gets_an_error_and_the_worker_keeps_serving(cluster: Cluster) -> None:
    address = address_of(cluster)
    with WireClient(address) as keeper:
        keeper.put("survivor", b"still here")
        # 1. unknown op
        with WireClient(address) as c:
            c.sock.sendall(frames.PREFIX.pack(frames.MAGIC, frames.VERSION, 99, 1, 0, 0))
            code, request_id, reply = c.raw_reply()
            assert (code, request_id, reply.errno) == (99 | frames.RESPONSE_BIT, 1, errno.EPROTO)
            assert_closed(c.sock)
        # 2. malformed header
        with WireClient(address) as c:
            c.sock.sendall(frames.PREFIX.pack(frames.MAGIC, frames.VERSION, int(Op.GET), 2, 3, 0) + b"\xff\xff\xff")
            code, request_id, reply = c.raw_reply()
            assert (code, request_id, reply.errno) == (int(Op.GET) | frames.RESPONSE_BIT, 2, errno.EPROTO)
            assert_closed(c.sock)
        # 3. a payload above --max-payload: refused before a payload byte is sent
        with WireClient(address) as c:
            body = DataHeader(key="too-big").SerializeToString()
            c.sock.sendall(frames.PREFIX.pack(frames.MAGIC, frames.VERSION, int(Op.PUT), 3, len(body),
                                              81 * MiB) + body)
            code, request_id, reply = c.raw_reply()
            assert (code, request_id, reply.errno) == (int(Op.PUT) | frames.RESPONSE_BIT, 3, errno.EFBIG)
            assert_closed(c.sock)
        # the connection opened before, and a new one, both still work
        assert keeper.get("survivor")[1] == b"still here"
        with WireClient(address) as c:
            assert c.get("too-big")[0].found is False
            assert c.call(Op.PING, DataHeader()).errno == 0


def test_short_circuit_get_returns_the_same_bytes_as_tcp(cluster: Cluster) -> None:
    data = random_bytes(14 * MiB + 3, seed=3)
    unix = str(cluster.worker_dir(0) / "worker.sock")
    members = cluster.client().master.membership().workers
    assert [w.unix_socket for w in members] == [unix]
    with WireClient(address_of(cluster)) as tcp, WireClient(unix) as local:
        tcp.put("sc", data)
        tcp_reply, tcp_bytes = tcp.get("sc")
        reply, fd = local.exchange_fd(Op.GET, DataHeader(key="sc"))
        assert fd is not None
        try:
            local_bytes = preadv_all(fd, reply.data_offset, reply.length)
        finally:
            os.close(fd)
        assert local_bytes == tcp_bytes == data
        assert list(reply.chunk_checksums) == list(tcp_reply.chunk_checksums)
        assert reply.checksum == tcp_reply.checksum


def test_restart_after_kill9_rebuilds_and_reregisters(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1) as cluster:
        worker_id = cluster.worker_id(0)
        small, big = random_bytes(5000, seed=1), random_bytes(9 * MiB, seed=2)
        with WireClient(address_of(cluster)) as c:
            c.put("small", small)
            c.put("big", big, storage_class=DURABLE)
            c.call(Op.WRITE_BLOCK, DataHeader(block_id=0xB10C), small)
        cluster.kill_worker(0)
        (cluster.worker_dir(0) / "tmp" / "junk.tmp").write_bytes(b"left by a crash")
        client = cluster.client()
        wait_until(lambda: not any(w.live for w in client.master.membership().workers), 15, "lease expiry")
        cluster.restart_worker(0)
        assert cluster.worker_id(0) == worker_id
        wait_until(lambda: [w.live for w in client.master.membership().workers] == [True], 15, "re-registration")
        with WireClient(address_of(cluster)) as c:
            assert c.get("small")[1] == small and c.get("big")[1] == big
            # The re-registration sent the inventory; no file references this block, so the
            # master answered with it in delete_block_ids and the worker deleted it.
            assert c.exchange(Op.READ_BLOCK, DataHeader(block_id=0xB10C))[0].errno == errno.ENOENT
        assert half_written(cluster.worker_dir(0) / "tmp") == []   # junk.tmp was swept
        wait_until(lambda: client.master.membership().workers[0].blocks == 0, 15, "a heartbeat after the delete")
        member = client.master.membership().workers[0]
        assert member.worker_id == worker_id and member.objects == 2


def test_kill9_mid_put_into_a_reused_file_leaves_nothing_that_reads(tmp_path: pathlib.Path) -> None:
    """A put that overwrites a freed file (worker/recycle.py) dies with the worker after part of its
    payload: after the restart neither the new key nor the deleted one reads, tmp/ is swept and no
    stored file is left beside the ones acknowledged."""
    with Cluster(tmp_path, workers=1, worker_args=WORKER_ARGS) as cluster:
        kept = random_bytes(3000, seed=29)
        tmp = cluster.worker_dir(0) / "tmp"
        with WireClient(address_of(cluster)) as c:
            assert c.put("old", random_bytes(4 * MiB, seed=30)).errno == 0
            assert c.put("kept", kept).errno == 0
            assert c.call(Op.DELETE, DataHeader(key="old")).found
        assert [p.name for p in tmp.iterdir() if p.name.endswith(".free")]
        new = random_bytes(4 * MiB, seed=31)
        c = WireClient(address_of(cluster))
        header = DataHeader(key="new", length=len(new), checksum=layout.object_checksum(new))
        c.sock.sendall(frames.encode(Op.PUT, 99, header, len(new)) + new[:3 * MiB])
        # The write took the freed file: it is being overwritten in place, under a tmp/ name.
        # Looked for afresh each time: the worker may rename it between a listing and its read
        # (a full run once read a .free name that had just gone).
        def overwritten() -> bool:
            for path in tmp.iterdir():
                try:
                    if path.name.endswith(FREED_SUFFIX) and new[:MiB] in path.read_bytes():
                        return True
                except FileNotFoundError:
                    continue
            return False
        wait_until(overwritten, 10, "the freed file overwritten")
        cluster.kill_worker(0)
        c.close()
        cluster.restart_worker(0)
        with WireClient(address_of(cluster)) as c:
            assert c.get("new")[0].found is False and c.get("old")[0].found is False
            assert c.get("kept")[1] == kept
        assert [p.name for p in tmp.iterdir() if p.stat().st_size] == []   # swept at the restart
        stored = [p for p in (cluster.worker_dir(0) / "kv").rglob("*") if p.is_file()]
        assert len(stored) == 1


def test_full_disk_gives_enospc_and_nothing_half_written(tmp_path: pathlib.Path) -> None:
    mount_point = tmp_path / "worker0"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)], check=True)
    try:
        with Cluster(tmp_path, workers=1) as cluster, WireClient(address_of(cluster)) as c:
            reply, _ = c.exchange(Op.PUT, DataHeader(key="too-big", storage_class=DURABLE),
                                  random_bytes(12 * MiB, seed=4))
            assert reply.errno == errno.ENOSPC
            assert c.put("d1", random_bytes(3 * MiB, seed=5), storage_class=DURABLE).errno == 0
            reply, _ = c.exchange(Op.PUT, DataHeader(key="d2", storage_class=DURABLE), random_bytes(6 * MiB))
            assert reply.errno == errno.ENOSPC
            assert c.get("too-big")[0].found is False and c.get("d2")[0].found is False
            assert half_written(mount_point / "tmp") == []
            # cache-class data is evicted to make room; durable data is not
            for i in range(3):
                assert c.put(f"c{i}", random_bytes(MiB, seed=10 + i), storage_class=CACHE).errno == 0
            assert c.put("c-new", random_bytes(3 * MiB, seed=20), storage_class=CACHE).errno == 0
            assert c.get("c-new")[0].found and c.get("d1")[0].found
            assert c.call(Op.EXISTS, DataHeader(keys=["c0"])).hit_count == 0
            assert c.put("d3", b"x" * 100, storage_class=DURABLE).errno == 0
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_token_is_checked_on_tcp_and_unix(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1, token="s3cret") as cluster:
        with WireClient(address_of(cluster), hello=False) as c:
            reply, _ = c.exchange(Op.HELLO, DataHeader(token="nope"))
            assert reply.errno == errno.EACCES
            assert_closed(c.sock)
        with WireClient(str(cluster.worker_dir(0) / "worker.sock"), hello=False) as c:
            reply, _ = c.exchange(Op.GET, DataHeader(key="k"))
            assert reply.errno == errno.EACCES
        with WireClient(address_of(cluster), token="s3cret") as c:
            assert c.put("k", b"v").errno == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ready_only_after_registration_and_sigterm_exits_0(tmp_path: pathlib.Path) -> None:
    port = free_port()
    worker = subprocess.Popen(curvine_command("worker", "--master", f"127.0.0.1:{port}", "--data-dir",
                                              str(tmp_path / "w"), "--port", "0"),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        time.sleep(1.5)   # the master is down: no ready line may appear meanwhile
        assert worker.poll() is None
        master = start("master", curvine_command("master", "--data-dir", str(tmp_path / "m"), "--port", str(port)),
                       ready_prefix="master=")
        try:
            assert worker.stdout is not None
            line = worker.stdout.readline().strip()
            host_port, worker_id = line.split()
            assert host_port.startswith("worker=127.0.0.1:") and worker_id.startswith("id=")
            assert worker_id[3:] == (tmp_path / "w" / "worker.id").read_text().strip()
            worker.terminate()
            assert worker.wait(15) == 0
            assert not (tmp_path / "w" / "worker.sock").exists()
        finally:
            master.stop()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_bad_lm_port_is_refused_clearly(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(curvine_command("worker", "--master", "127.0.0.1:1", "--data-dir", str(tmp_path),
                                            "--lm-port", "-5"), check=False, capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2 and "--lm-port must be a port" in result.stderr
