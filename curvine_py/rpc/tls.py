"""TLS for the cluster's TCP ports when certificates are given (`--tls-cert/--tls-key/--tls-ca`):
gRPC credentials for the master's server and every channel to it, and `ssl` contexts for the
worker's data plane and its clients. The unix short-circuit socket stays plain (same node, token
checked, and it passes file descriptors, which TLS cannot carry).

Trust model: one cluster CA. A server presents `cert` (signed by the CA); with `ca` given, a
server requires a client certificate signed by it (mutual TLS) and a client verifies the server's
certificate against it. Data-plane peers are checked against the CA only, not by host name
(workers are addressed by IP and placed by the master); gRPC checks the master's name or IP
against the certificate as it always does. Without a certificate nothing changes (plain TCP).

Data plane on TLS: `TlsSocket` is the socket class of the worker's wrapped connections; it maps
what the servers' blocking code relies on onto TLS (kernel timeouts become Python timeouts that
surface as BlockingIOError, MSG_DONTWAIT reads only what is already decrypted). sendfile cannot be used (the kernel would send
plaintext): replies of stored files are read and sent (see worker/server.py).
"""
from __future__ import annotations

import argparse
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Any

import grpc

from curvine_py.core.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: str = ""      # PEM certificate chain presented by this process
    key: str = ""       # its PEM private key
    ca: str = ""        # PEM CA bundle: peers must be signed by it

    @property
    def enabled(self) -> bool:
        return bool(self.cert or self.ca)

    def check(self, role: str, *, server: bool) -> None:
        """Clear errors for incomplete or unreadable settings, before anything listens."""
        if bool(self.cert) != bool(self.key):
            raise InvalidArgument(f"{role}: --tls-cert and --tls-key go together")
        if server and self.enabled and not self.cert:
            raise InvalidArgument(f"{role}: TLS needs --tls-cert and --tls-key (--tls-ca alone is a client setting)")
        for name, path in (("--tls-cert", self.cert), ("--tls-key", self.key), ("--tls-ca", self.ca)):
            if path:
                try:
                    with open(path, "rb"):
                        pass
                except OSError as exc:
                    raise InvalidArgument(f"{role}: {name} {path}: {exc.strerror or exc}") from None


def add_tls_options(parser: argparse.ArgumentParser) -> None:
    """--tls-cert/--tls-key/--tls-ca (fields tls_cert/tls_key/tls_ca of the role's config)."""
    parser.add_argument("--tls-cert", help="PEM certificate: TLS on gRPC and the data plane (with --tls-key)")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    parser.add_argument("--tls-ca", help="PEM CA: peers must present a certificate it signed (mutual TLS)")


def tls_files(config: Any) -> TlsFiles:
    """The TLS settings of a MasterConfig, WorkerConfig or ClientConfig (fields tls_cert/key/ca)."""
    return TlsFiles(getattr(config, "tls_cert", ""), getattr(config, "tls_key", ""), getattr(config, "tls_ca", ""))


def _read(path: str) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """The master's gRPC server: its certificate; with a CA, client certificates are required."""
    cert, key = _read(files.cert), _read(files.key)
    assert cert is not None and key is not None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=_read(files.ca),
                                       require_client_auth=bool(files.ca))


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """A channel to a TLS master: the server checked against the CA, our certificate presented."""
    return grpc.ssl_channel_credentials(root_certificates=_read(files.ca), private_key=_read(files.key),
                                        certificate_chain=_read(files.cert))


class TlsSocket(ssl.SSLSocket):
    """A worker's TLS connection that behaves, for the servers' blocking code, like the plain
    socket. Kernel timeouts do not work under TLS (CPython's read loop retries SSL_read on a
    blocking socket after EAGAIN, forever), so SO_RCVTIMEO/SO_SNDTIMEO set on it are kept and
    applied as Python timeouts on each receive and send, and a timeout surfaces as the plain
    socket's EAGAIN (BlockingIOError). MSG_DONTWAIT reads only bytes already decrypted."""

    _recv_timeout: float | None = None
    _send_timeout: float | None = None

    def setsockopt(self, level: int, optname: int, value: Any, *rest: Any) -> None:
        if level == socket.SOL_SOCKET and optname in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO) \
                and isinstance(value, bytes):
            seconds, micros = _TIMEVAL.unpack(value)
            timeout = seconds + micros / 1e6 or None
            if optname == socket.SO_RCVTIMEO:
                self._recv_timeout = timeout
            else:
                self._send_timeout = timeout
            return
        super().setsockopt(level, optname, value, *rest)

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        if flags & socket.MSG_DONTWAIT:
            if not self.pending():
                raise BlockingIOError("no decrypted bytes waiting")
            flags &= ~socket.MSG_DONTWAIT
        self.settimeout(self._recv_timeout)
        try:
            return super().recv_into(buffer, nbytes, flags)
        except (TimeoutError, ssl.SSLWantReadError):
            raise BlockingIOError("receive timed out") from None

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.settimeout(self._send_timeout)
        try:
            super().sendall(data, flags)
        except (TimeoutError, ssl.SSLWantWriteError):
            raise BlockingIOError("send timed out") from None


_TIMEVAL = struct.Struct("@ll")


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """The worker's data plane: its certificate; with a CA, client certificates are required."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(files.cert, files.key)
    if files.ca:
        context.load_verify_locations(files.ca)
        context.verify_mode = ssl.CERT_REQUIRED
    context.sslsocket_class = TlsSocket
    return context


def client_context(files: TlsFiles) -> ssl.SSLContext:
    """A data-plane client: the worker checked against the CA (not by name), our certificate presented."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    if files.ca:
        context.load_verify_locations(files.ca)
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        context.verify_mode = ssl.CERT_NONE     # encrypted, server not verified: say --tls-ca
    if files.cert:
        context.load_cert_chain(files.cert, files.key)
    return context      # plain SSLSocket: the client uses Python timeouts already (dataconn.py)


def wrap_server(context: ssl.SSLContext, conn: socket.socket, timeout_s: float) -> socket.socket:
    """The TLS handshake of an accepted data-plane connection, bounded by `timeout_s`."""
    conn.settimeout(timeout_s if timeout_s > 0 else None)
    wrapped = context.wrap_socket(conn, server_side=True)
    wrapped.settimeout(None)     # the servers bound their waits with kernel timeouts
    return wrapped
