"""TLS on gRPC and the data plane (issue 11), with certificates made here (tests/tlscerts.py: the
`cryptography` package, else the openssl command): a cluster whose master and workers run with
--tls-cert/--tls-key/--tls-ca serves KV puts and gets and files to a client with a certificate of the cluster CA (the master's repair and the
worker's own clients included); a client without TLS, or with a certificate of another CA, is
refused on the gRPC port and on the data port, and nothing it tried is stored."""
from __future__ import annotations

import pathlib
import socket
import ssl

import pytest

from curvine_py.client import CurvineClient
from curvine_py.core import frames
from curvine_py.core.domain import Policy, StorageClass
from curvine_py.core.errors import CurvineError
from curvine_py.core.frames import Op
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from tests.harness import Cluster, random_bytes
from tests.integration.test_cli import cli
from tests.integration.test_worker_process import address_of
from tests.tlscerts import make_authority

MiB = 1 << 20


def test_a_tls_cluster_serves_its_clients_and_refuses_the_others(tmp_path: pathlib.Path) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    cluster_ca, other_ca_ = make_authority(certs, "cluster"), make_authority(certs, "other")
    ca, other_ca = pathlib.Path(cluster_ca.ca), pathlib.Path(other_ca_.ca)
    server_cert, server_key = cluster_ca.issue("server")
    client_cert, client_key = cluster_ca.issue("client")
    foreign_cert, foreign_key = other_ca_.issue("foreign")
    tls_args = ["--tls-cert", server_cert, "--tls-key", server_key, "--tls-ca", str(ca)]
    good = {"tls_cert": client_cert, "tls_key": client_key, "tls_ca": str(ca)}

    with Cluster(tmp_path / "cluster", workers=2, master_args=tls_args, worker_args=tls_args) as cluster:
        client = cluster.client(**good)
        assert sum(w.live for w in client.master.membership().workers) == 2, "workers registered over TLS"
        value = random_bytes(300_000, seed=1)
        client.kv.put("tls-key", value)
        assert client.kv.get("tls-key") == value
        client.fs.mkdir("/durable")
        client.fs.set_policy("/durable", Policy(storage_class=StorageClass.DURABLE, replicas=2, block_size=MiB))
        data = random_bytes(3 * MiB + 17, seed=2)     # blocks past the inline size: no sendfile on TLS
        with client.fs.open("/durable/f", "wb") as f:
            f.write(data)
        fresh = CurvineClient(cluster.master_address, node="fresh", short_circuit=False, **good)  # type: ignore[arg-type]
        try:
            with fresh.fs.open("/durable/f") as f:
                assert f.read() == data
            assert fresh.kv.get("tls-key") == value
        finally:
            fresh.close()

        # The CLI takes the same flags; the master's own data-plane client (fsck --scrub, repair)
        # reaches the workers over TLS.
        tls_flags = ["--tls-cert", client_cert, "--tls-key", client_key, "--tls-ca", str(ca)]
        scrub = cli("fsck", "--master", cluster.master_address, "--scrub", *tls_flags)
        assert scrub.returncode == 0, scrub.stdout.decode() + scrub.stderr.decode()
        assert b"0 corrupt" in scrub.stdout and b" 0 copies verified" not in scrub.stdout
        plain_cli = cli("report", "--master", cluster.master_address, "--timeout", "3")
        assert plain_cli.returncode == 1

        # gRPC: no TLS, and a certificate of another CA, are refused.
        for label, settings in (("plain", {}), ("other CA", {"tls_cert": foreign_cert, "tls_key": foreign_key,
                                                             "tls_ca": str(other_ca)}),
                                ("no client cert", {"tls_ca": str(ca)})):
            stranger = CurvineClient(cluster.master_address, node="stranger", rpc_timeout_s=3.0,
                                     **settings)  # type: ignore[arg-type]
            try:
                with pytest.raises(CurvineError):
                    stranger.master.membership()
            finally:
                stranger.close()

        # The data port: a plain client, one without a client certificate and one with a certificate
        # of another CA get no answer (the handshake fails and the worker closes), and store nothing.
        host, port = address_of(cluster)
        assert refused(host, port, None), "plain TCP"
        assert refused(host, port, _context(str(ca), None)), "no client certificate"
        assert refused(host, port, _context(str(ca), (foreign_cert, foreign_key))), "a certificate of another CA"
        assert not refused(host, port, _context(str(ca), (client_cert, client_key))), "the cluster's own"
        assert client.kv.get("tls-key") == value, "the worker serves on"


def refused(host: str, port: int, context: ssl.SSLContext | None) -> bool:
    """True when the worker closes (or fails the handshake) instead of answering a frame."""
    hello = frames.encode(Op.HELLO, 1, DataHeader(token=""))
    try:
        with socket.create_connection((host, port), timeout=15) as raw:
            sock = context.wrap_socket(raw) if context else raw
            sock.sendall(hello)
            return sock.recv(1) == b""
    except (ssl.SSLError, ConnectionError):
        return True


def _context(ca: str, cert: tuple[str, str] | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.load_verify_locations(ca)
    if cert:
        context.load_cert_chain(*cert)
    return context
