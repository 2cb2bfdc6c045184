"""The one way a process opens a gRPC channel to the master: message limits and reconnect settings
in one place (a master restart must be noticed within about a second by clients, workers and
mounts alike, instead of gRPC's default backoff of up to 120 s)."""
from __future__ import annotations

import grpc

from curvine_py.rpc.tls import TlsFiles, channel_credentials

MAX_MESSAGE = 64 << 20

CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


def master_channel(address: str, tls: TlsFiles | None = None) -> grpc.Channel:
    """A channel to the master at HOST:PORT; it reconnects by itself. With `tls` enabled (a CA or
    a certificate given), over TLS (rpc/tls.py)."""
    if tls is not None and tls.enabled:
        return grpc.secure_channel(address, channel_credentials(tls), options=list(CHANNEL_OPTIONS))
    return grpc.insecure_channel(address, options=list(CHANNEL_OPTIONS))
