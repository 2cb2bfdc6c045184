"""The one way a process opens a gRPC channel to the master: message limits and reconnect settings
in one place (a master restart must be noticed within about a second by clients, workers and
mounts alike, instead of gRPC's default backoff of up to 120 s; a master that hangs within about
two, by keepalive pings).

`--master` may name several masters (`a:8995,b:8995`, config.parse_master_list): the channel is
then a LeaderChannel (rpc/leader.py) that sends each call to the one that leads and follows the
followers' hints. One address is a plain grpc.Channel, as it always was."""
from __future__ import annotations

import grpc

from curvine_py.config import DEFAULT_MASTER_PORT, parse_master_list
from curvine_py.rpc.leader import LeaderChannel
from curvine_py.rpc.tls import TlsFiles, channel_credentials

MAX_MESSAGE = 64 << 20

CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # A master that stops answering (SIGSTOP, a wedged process, a cut link) is noticed within
    # KEEPALIVE_MS + KEEPALIVE_TIMEOUT_MS: the connection is closed and the channel leaves READY,
    # so a list of masters moves on (rpc/leader.py). The master permits pings this often
    # (master/service.py server_options).
    ("grpc.keepalive_time_ms", 1000),
    ("grpc.keepalive_timeout_ms", 1000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)

# What MasterStub is built on: it only calls `unary_unary`; its owners call `close`.
MasterChannel = grpc.Channel | LeaderChannel


def one_channel(address: str, tls: TlsFiles | None = None) -> grpc.Channel:
    """A channel to one master at HOST:PORT; it reconnects by itself. With `tls` enabled (a CA or
    a certificate given), over TLS (rpc/tls.py)."""
    if tls is not None and tls.enabled:
        return grpc.secure_channel(address, channel_credentials(tls), options=list(CHANNEL_OPTIONS))
    return grpc.insecure_channel(address, options=list(CHANNEL_OPTIONS))


def master_channel(masters: str, tls: TlsFiles | None = None) -> MasterChannel:
    """A channel to the master(s) named by `masters` (HOST:PORT[,HOST:PORT...]; InvalidArgument
    for a bad list): a plain channel for one, a leader-following one for several."""
    addresses = parse_master_list(masters, DEFAULT_MASTER_PORT)
    if len(addresses) == 1:
        return one_channel(addresses[0], tls)
    return LeaderChannel(addresses, lambda address: one_channel(address, tls))
