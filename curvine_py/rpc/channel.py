"""The one way a process opens a gRPC channel to the master: message limits and reconnect settings
in one place (a master restart must be noticed within about a second by clients, workers and
mounts alike, instead of gRPC's default backoff of up to 120 s)."""
from __future__ import annotations

import grpc

MAX_MESSAGE = 64 << 20

CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


def master_channel(address: str) -> grpc.Channel:
    """A channel to the master at HOST:PORT; it reconnects by itself."""
    return grpc.insecure_channel(address, options=list(CHANNEL_OPTIONS))
