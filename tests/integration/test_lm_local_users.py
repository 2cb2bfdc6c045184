"""lm:// on loopback in a cluster with a token: only the local users the operator named may use it.

LMCache's protocol has no credentials, so the port used to serve every local user: `nobody` read
and planted KV data, and its idle connections used up the connection cap. The owner of a loopback
peer's socket is now read from the kernel's socket table: the worker's own user (and
`--lm-allow-uid UID`) is served; any other local user is closed before a byte is read.
"""
from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import time

from curvine_py.core import lmproto
from curvine_py.transport.peeruid import peer_uid
from tests.harness import Cluster

TOKEN = "lm-local-users-s3cret-0123456789"
NOBODY = 65534
# Runs as `nobody` with the system interpreter: sends the given request bytes, prints the reply bytes.
SEND_AS_USER = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
try:
    s.sendall(bytes.fromhex(sys.argv[3]))
    reply = b""
    while len(reply) < int(sys.argv[4]):
        chunk = s.recv(65536)
        if not chunk:
            break
        reply += chunk
    print("reply", reply.hex())
except (BrokenPipeError, ConnectionResetError):
    print("reply ")
"""


def send_as(uid: int, address: tuple[str, int], request: bytes, expect: int) -> bytes:
    result = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "/usr/bin/python3",
                             "-c", SEND_AS_USER, address[0], str(address[1]), request.hex(), str(expect)],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    return bytes.fromhex(result.stdout.split("reply", 1)[1].strip())


def lm_address(cluster: Cluster) -> tuple[str, int]:
    host, port = cluster.workers[0].field("lm").rsplit(":", 1)   # type: ignore[union-attr]
    return host, int(port)


def put_request(key: str, data: bytes) -> bytes:
    meta = lmproto.ObjectMeta(len(data), lmproto.MemoryFormat.BINARY, lmproto.Dtype.UINT8, (len(data), 0, 0, 0))
    return lmproto.encode_request(lmproto.Command.PUT, key, meta) + data


HEALTH = lmproto.encode_request(lmproto.Command.HEALTH, "")


def test_the_kernel_names_the_user_on_the_other_end_of_a_loopback_connection() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as ours:
            theirs, _ = server.accept()
            with theirs:
                assert peer_uid(theirs) == os.geteuid() and peer_uid(ours) == os.geteuid()
        probe = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                                  "/usr/bin/python3", "-c",
                                  "import socket, sys, time; s = socket.create_connection(('127.0.0.1', "
                                  f"{port})); time.sleep(30)"])
        try:
            server.settimeout(20)
            theirs, _ = server.accept()
            with theirs:
                assert peer_uid(theirs) == NOBODY
        finally:
            probe.kill()
            probe.wait()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        assert peer_uid(unix) is None


def test_another_local_user_is_closed_and_plants_nothing_while_the_workers_user_is_served(
        tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1, token=TOKEN, worker_args=["--lm-port", "-1"]) as cluster:
        cluster.wait_for_live_workers(1)
        address = lm_address(cluster)
        assert send_as(0, address, HEALTH, lmproto.REPLY_SIZE) == lmproto.SUCCESS_REPLY   # the worker's user
        assert send_as(NOBODY, address, HEALTH, lmproto.REPLY_SIZE) == b""               # closed, no reply
        assert send_as(NOBODY, address, put_request("planted-by-nobody", b"x" * 4096), 1) == b""
        assert send_as(0, address, put_request("written-by-root", b"y" * 4096), 0) == b""
        client = cluster.client()
        deadline = time.monotonic() + 10     # a PUT has no reply: wait for the allowed one to land
        while client.kv.get("written-by-root") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.kv.get("written-by-root") == b"y" * 4096
        assert client.kv.get("planted-by-nobody") is None


def test_a_named_uid_is_served(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1, token=TOKEN,
                 worker_args=["--lm-port", "-1", "--lm-allow-uid", str(NOBODY)]) as cluster:
        cluster.wait_for_live_workers(1)
        assert send_as(NOBODY, lm_address(cluster), HEALTH, lmproto.REPLY_SIZE) == lmproto.SUCCESS_REPLY


def test_without_a_token_every_local_user_is_served_as_before(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1, worker_args=["--lm-port", "-1"]) as cluster:
        cluster.wait_for_live_workers(1)
        assert send_as(NOBODY, lm_address(cluster), HEALTH, lmproto.REPLY_SIZE) == lmproto.SUCCESS_REPLY
