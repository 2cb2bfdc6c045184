"""Which local user is on the other end of a loopback TCP connection.

TCP has no SO_PEERCRED, but the kernel lists every socket of this host with its owner in
/proc/net/tcp and /proc/net/tcp6: the peer's socket is the row whose local address is our peer
address and whose remote address is our own. This is how an unauthenticated protocol on loopback
(LMCache's lm://) can still tell the node's own serving engines from any other local user.
"""
from __future__ import annotations

import ipaddress
import pathlib
import socket

PROC_NET = pathlib.Path("/proc/net")


def _proc_hex(host: str, port: int) -> str:
    """An address as /proc/net/tcp{,6} spells it: the address in host byte order, 32 bits at a time."""
    address = ipaddress.ip_address(host.split("%", 1)[0])
    raw = address.packed
    words = "".join(raw[i:i + 4][::-1].hex().upper() for i in range(0, len(raw), 4))
    return f"{words}:{port:04X}"


def _rows(table: pathlib.Path) -> list[list[str]]:
    try:
        lines = table.read_text().splitlines()[1:]
    except OSError:
        return []
    return [line.split() for line in lines]


def peer_uid(conn: socket.socket, proc_net: pathlib.Path = PROC_NET) -> int | None:
    """The uid owning the peer socket of a TCP connection from this host; None when it cannot be
    told (a peer on another host, a unix socket, a connection already gone)."""
    if conn.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        peer_host, peer_port = conn.getpeername()[:2]
        own_host, own_port = conn.getsockname()[:2]
    except OSError:
        return None
    table = proc_net / ("tcp6" if conn.family == socket.AF_INET6 else "tcp")
    peer, own = _proc_hex(peer_host, peer_port), _proc_hex(own_host, own_port)
    for fields in _rows(table):
        # sl local_address rem_address st tx:rx tr:when retrnsmt uid ...
        if len(fields) > 7 and fields[1] == peer and fields[2] == own:
            return int(fields[7])
    return None
