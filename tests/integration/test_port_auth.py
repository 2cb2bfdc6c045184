"""Every port of a token cluster refuses a client without the token (issue 11), one test per port,
against real processes. What each refusal looks like to the client:

| port | credential | a client without it sees |
|---|---|---|
| master gRPC | `authorization` metadata | status UNAUTHENTICATED on every RPC (no token and a wrong one alike); the library raises PermissionDenied (EACCES); nothing is changed (a worker registered without the token is not in the view) |
| worker data TCP | HELLO with the token | an error frame with errno EACCES to its first request (HELLO with a wrong token, or any other op before HELLO), then EOF; a PUT sent before HELLO stores nothing |
| worker unix short-circuit socket | file mode 0600 (root only) + HELLO | a non-root uid: connect() fails with EACCES; root without the token: EACCES error frame and no file descriptor passed |
| worker lm:// | none in LMCache's protocol: where it binds | by default it binds 127.0.0.1: from another network namespace connect() is refused (ECONNREFUSED); a reachable address is refused at start (exit 2) without --lm-insecure; a peer outside --lm-allow is closed at accept (EOF before any reply) and a PUT it sent plants nothing |
| CSI unix socket | file mode 0600 (root only) | a non-root uid: connect() fails with EACCES |

A metrics or status HTTP port is not served by the roles on main yet (observe/roles.py is not
wired into master/worker main), so there is no test for it here.
"""
from __future__ import annotations

import errno
import os
import pathlib
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import grpc
import pytest

from curvine_py.client import ClientConfig, CurvineClient
from curvine_py.client.kv import KVClient
from curvine_py.client.workerio import WorkerIO
from curvine_py.core import frames, lmproto
from curvine_py.core.errors import PermissionDenied
from curvine_py.proto.curvine.v1 import common_pb2 as cpb
from curvine_py.proto.curvine.v1 import master_pb2 as pb
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.proto.curvine.v1.master_pb2_grpc import MasterStub
from tests.csi.plugin import Plugin
from tests.harness import Cluster, wait_until
from tests.netns import network_namespaces, requires_netns
from tests.unit.test_worker_server import WireClient, assert_closed

TOKEN = "port-auth-s3cret-0123456789"
Op = frames.Op
ROOT = 1
NOBODY = 65534
# The probe runs as `nobody` with the system interpreter and no repository on its path: it only
# stats and connects a unix socket.
CONNECT_AS_NOBODY = """
import os, socket, sys
path = sys.argv[1]
os.stat(path)                      # the directories are traversable: a refusal is the socket's mode
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(path)
    print("connected")
except OSError as exc:
    print("refused", exc.errno)
"""


def connect_as_nobody(path: pathlib.Path) -> str:
    result = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                             "/usr/bin/python3", "-c", CONNECT_AS_NOBODY, str(path)],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture(scope="module")
def open_dir() -> Iterator[pathlib.Path]:
    """A directory every uid may traverse (pytest's tmp dirs are 0700: a non-root probe would be
    refused by the directory, not by the socket's own mode)."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="curvine-port-auth-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


@pytest.fixture(scope="module")
def cluster(open_dir: pathlib.Path) -> Iterator[Cluster]:
    with Cluster(open_dir / "cluster", workers=1, token=TOKEN, worker_args=["--lm-port", "-1"]) as c:
        c.wait_for_live_workers(1)
        for part in (c.root, c.worker_dir(0)):
            part.chmod(0o755)
        yield c


def worker_address(cluster: Cluster) -> tuple[str, int]:
    host, port = cluster.workers[0].address.rsplit(":", 1)   # type: ignore[union-attr]
    return host, int(port)


def lm_address(cluster: Cluster) -> tuple[str, int]:
    host, port = cluster.workers[0].field("lm").rsplit(":", 1)   # type: ignore[union-attr]
    return host, int(port)


def authorised_get(cluster: Cluster, key: str) -> bytes | None:
    return cluster.client().kv.get(key)


# -- master gRPC ------------------------------------------------------------------------------------

@pytest.mark.parametrize("token", ["", "wrong-token"], ids=["no-token", "wrong-token"])
def test_master_grpc_answers_unauthenticated_and_changes_nothing(cluster: Cluster, token: str) -> None:
    channel = grpc.insecure_channel(cluster.master_address)
    stub = MasterStub(channel)  # type: ignore[no-untyped-call]
    metadata = [("authorization", f"Bearer {token}")] if token else []
    before = {w.worker_id for w in cluster.client().master.membership().workers}
    try:
        calls = [
            (stub.GetAttr, pb.InodeRequest(ino=ROOT)),
            (stub.GetMembership, pb.Empty()),
            (stub.Create, pb.CreateRequest(parent=ROOT, name="planted", type=cpb.REGULAR, mode=0o644)),
            (stub.RegisterWorker, pb.RegisterWorkerRequest(
                info=pb.WorkerInfo(worker_id="intruder", host="127.0.0.1", port=1))),
        ]
        for rpc, request in calls:
            with pytest.raises(grpc.RpcError) as info:
                rpc(request, timeout=10, metadata=metadata)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, rpc
            assert TOKEN not in (info.value.details() or "")
    finally:
        channel.close()
    # the library says PermissionDenied (EACCES), and nothing above took effect
    stranger = CurvineClient(cluster.master_address, token=token, node="stranger")
    try:
        with pytest.raises(PermissionDenied):
            stranger.fs.stat("/")
    finally:
        stranger.close()
    admin = cluster.client()
    assert not admin.fs.exists("/planted")
    assert {w.worker_id for w in admin.master.membership().workers} == before
    assert "intruder" not in before


# -- worker data TCP ----------------------------------------------------------------------------------

def test_worker_data_port_refuses_a_wrong_token_and_requests_before_hello(cluster: Cluster) -> None:
    with WireClient(worker_address(cluster), hello=False) as c:
        reply, _ = c.exchange(Op.HELLO, DataHeader(token="wrong-token"))
        assert reply.errno == errno.EACCES and TOKEN not in reply.message
        assert_closed(c.sock)
    with WireClient(worker_address(cluster), hello=False) as c:
        reply, data = c.exchange(Op.GET, DataHeader(key="anything"))
        assert reply.errno == errno.EACCES and not data
        assert_closed(c.sock)
    with WireClient(worker_address(cluster), hello=False) as c:     # a plant attempt without HELLO
        payload = b"planted bytes"
        c.send(Op.PUT, DataHeader(key="planted-tcp", length=len(payload)), payload)
        _prefix, reply, _ = c.receive()
        assert reply.errno == errno.EACCES
        assert_closed(c.sock)
    assert authorised_get(cluster, "planted-tcp") is None
    # the token opens the same port (the refusals above were about the token, nothing else)
    with WireClient(worker_address(cluster), token=TOKEN) as c:
        assert c.put("allowed-tcp", b"v").errno == 0
    assert authorised_get(cluster, "allowed-tcp") == b"v"


def test_worker_data_port_through_the_library_with_a_wrong_token(cluster: Cluster) -> None:
    cluster.client().kv.put("library-key", b"secret bytes")
    # a client that got the membership view some other way still can neither read nor plant
    view = cluster.client().membership
    stranger_io = WorkerIO(ClientConfig(master=cluster.master_address, token="wrong-token"), "stranger")
    stranger = KVClient(view, stranger_io)
    try:
        with pytest.raises(PermissionDenied):
            stranger.put("planted-library", b"x")
        with pytest.raises(PermissionDenied):
            stranger.get("library-key")
    finally:
        stranger_io.close()
    assert authorised_get(cluster, "planted-library") is None
    assert authorised_get(cluster, "library-key") == b"secret bytes", "a refused get dropped nothing"


# -- worker unix short-circuit socket ---------------------------------------------------------------

def test_worker_unix_socket_is_root_only_and_needs_the_token(cluster: Cluster) -> None:
    path = cluster.worker_dir(0) / "worker.sock"
    mode = path.stat().st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600 and path.stat().st_uid == 0
    assert connect_as_nobody(path) == f"refused {errno.EACCES}"
    cluster.client().kv.put("local-key", b"local bytes")
    with WireClient(str(path), hello=False) as c:       # root, but no HELLO: no file descriptor
        reply, fd = c.exchange_fd(Op.GET, DataHeader(key="local-key"))
        assert reply.errno == errno.EACCES and fd is None
    with WireClient(str(path), hello=False) as c:
        reply, _ = c.exchange(Op.HELLO, DataHeader(token="wrong-token"))
        assert reply.errno == errno.EACCES
        assert_closed(c.sock)
    with WireClient(str(path), token=TOKEN) as c:
        reply, fd = c.exchange_fd(Op.GET, DataHeader(key="local-key"))
        assert reply.errno == 0 and fd is not None
        os.close(fd)


# -- worker lm:// ----------------------------------------------------------------------------------

def lm_health(address: tuple[str, int]) -> bytes:
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(lmproto.encode_request(lmproto.Command.HEALTH, ""))
        try:
            return sock.recv(lmproto.REPLY_SIZE)
        except ConnectionResetError:
            return b""


def test_lm_port_binds_node_local_by_default(cluster: Cluster) -> None:
    host, port = lm_address(cluster)
    assert host == "127.0.0.1"
    assert lm_health((host, port)) == lmproto.SUCCESS_REPLY       # the engines of this node
    listening = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True,
                               timeout=10, check=True).stdout.split()
    assert f"127.0.0.1:{port}" in listening and f"0.0.0.0:{port}" not in listening and f"*:{port}" not in listening


PROBE_REMOTE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
    print("connected")
except OSError as exc:
    print("refused", exc.errno)
"""


@requires_netns()
def test_lm_port_is_unreachable_from_another_host_by_default(tmp_path: pathlib.Path) -> None:
    with network_namespaces(1) as lab, Cluster(tmp_path, workers=1, token=TOKEN, host=lab.root_address,
                                                worker_args=["--lm-port", "-1"]) as cluster:
        host, port = lm_address(cluster)
        assert host == "127.0.0.1"
        # the worker's data port is on the reachable address; its lm:// port is not
        probe = lab[0].run([sys.executable, "-c", PROBE_REMOTE, lab.root_address, str(port)])
        assert probe.stdout.strip() == f"refused {errno.ECONNREFUSED}", probe.stderr
        data_port = cluster.workers[0].address.rsplit(":", 1)[1]   # type: ignore[union-attr]
        control = lab[0].run([sys.executable, "-c", PROBE_REMOTE, lab.root_address, data_port])
        assert control.stdout.strip() == "connected", control.stderr


@pytest.mark.parametrize("lm_host", ["0.0.0.0", "::"])
def test_lm_port_on_a_reachable_address_is_refused_at_start(tmp_path: pathlib.Path, cluster: Cluster,
                                                          lm_host: str) -> None:
    from curvine_py.procs import curvine_command
    result = subprocess.run(curvine_command(
        "worker", "--master", cluster.master_address, "--data-dir", str(tmp_path / "d"), "--token", TOKEN,
        "--lm-port", "-1", "--lm-host", lm_host), capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert "--lm-insecure" in result.stderr and TOKEN not in result.stderr + result.stdout
    assert "worker=" not in result.stdout, "it never served"


def test_lm_port_refuses_a_peer_outside_its_allow_list(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1, token=TOKEN,
                 worker_args=["--lm-port", "-1", "--lm-allow", "10.255.0.0/16"]) as cluster:
        address = lm_address(cluster)
        assert lm_health(address) == b"", "closed at accept, before any reply"
        with socket.create_connection(address, timeout=10) as sock:      # a plant attempt
            data = b"planted by a stranger"
            meta = lmproto.ObjectMeta(len(data), lmproto.MemoryFormat.BINARY, lmproto.Dtype.UINT8,
                                      (len(data), 0, 0, 0))
            try:
                sock.sendall(lmproto.encode_request(lmproto.Command.PUT, "planted-lm", meta) + data)
                assert sock.recv(1) == b""
            except (BrokenPipeError, ConnectionResetError):
                pass
        time.sleep(0.5)   # a PUT has no reply in LMCache's protocol: give a (wrongly) accepted one time to land
        client = cluster.client()
        assert client.kv.get("planted-lm") is None and not client.kv.exists("planted-lm")


# -- CSI unix socket ----------------------------------------------------------------------------------

def test_csi_socket_is_root_only(cluster: Cluster, open_dir: pathlib.Path) -> None:
    root = open_dir / "csi-plugin"
    with Plugin(root, cluster.master_address, controller=True, node=False, token=TOKEN) as plugin:
        for part in (root, plugin.socket.parent):
            part.chmod(0o755)
        wait_until(plugin.socket.exists, 10, "the CSI socket")
        mode = plugin.socket.stat().st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600 and plugin.socket.stat().st_uid == 0
        assert connect_as_nobody(plugin.socket) == f"refused {errno.EACCES}"
        from curvine_py.proto.csi.v1 import csi_pb2 as csi
        assert plugin.identity.Probe(csi.ProbeRequest(), timeout=10) is not None   # root is served
