"""What a peer may hold on a worker's servers (data plane, short-circuit socket, lm://): open
connections in all and per peer, idle time, time to a full frame header, time to authenticate; and
the process's file-descriptor limit they are sized from.

Why: a thread per connection and no limits let 1,100 idle sockets at a 1,024-fd limit starve every
client (issue 11). With the caps below the fd limit, an open connection always has the descriptors
its requests need (a stored file, a dup of a cached one), and a new connection over a cap is told so
at once (an EAGAIN error frame: the client tries the next replica or misses) instead of waiting.

Sizing (0 = auto): each connection may hold two descriptors (its socket and a stored file during
a request); FD_HEADROOM stays for everything else the worker keeps open (the fd cache of the read
path, temp files, data dir locks, listening sockets, gRPC channels, the lm:// relay's connections).
"""
from __future__ import annotations

import logging
import resource
import socket
import struct
import threading
from dataclasses import dataclass, replace

from curvine_py.core.errors import Busy, InvalidArgument

log = logging.getLogger(__name__)

FD_HEADROOM = 128
FDS_PER_CONNECTION = 2
MIN_CONNECTIONS = 8
# Auto sizing stops here whatever the fd limit: a thread per connection (8 MiB of address space and
# a kernel task each) is the next resource to run out.
MAX_AUTO_CONNECTIONS = 16384
DEFAULT_IDLE_TIMEOUT_S = 300.0
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_AUTH_TIMEOUT_S = 10.0
_UCRED = struct.Struct("3i")   # struct ucred: pid, uid, gid


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_connections: int = 0            # 0 = from the fd limit (see `resolved`)
    max_per_peer: int = 0               # 0 = half of max_connections
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S      # 0 = never
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S  # 0 = never
    auth_timeout_s: float = DEFAULT_AUTH_TIMEOUT_S      # 0 = never
    profile_dir: str = ""               # each connection under cProfile, stats here; "" = off

    def __post_init__(self) -> None:
        if self.max_connections < 0 or self.max_per_peer < 0:
            raise InvalidArgument("connection limits must be >= 0 (0 = automatic)")
        if min(self.idle_timeout_s, self.header_timeout_s, self.auth_timeout_s) < 0:
            raise InvalidArgument("timeouts must be >= 0 (0 = none)")

    def resolved(self, fd_limit: int) -> ServerLimits:
        """The limits with every 0 = auto replaced, for a process allowed `fd_limit` descriptors."""
        total = self.max_connections or max(MIN_CONNECTIONS, min(MAX_AUTO_CONNECTIONS,
                                                                 (fd_limit - FD_HEADROOM) // FDS_PER_CONNECTION))
        per_peer = min(self.max_per_peer or max(1, total // 2), total)
        return replace(self, max_connections=total, max_per_peer=per_peer)


# No timeouts (an embedding or a test that sets none); caps need a ConnectionGate anyway.
UNBOUNDED = ServerLimits(idle_timeout_s=0, header_timeout_s=0, auth_timeout_s=0)


def raise_fd_limit() -> int:
    """Raises RLIMIT_NOFILE's soft limit to the hard one where allowed; returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the fd limit from %d to %d: %s", soft, hard, exc)
    return int(soft) if soft != resource.RLIM_INFINITY else 1 << 20


def peer_key(conn: socket.socket, address: object) -> str:
    """Whom a connection counts against: the peer's IP address (any port), or for a unix socket the
    peer process (SO_PEERCRED)."""
    if conn.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple):
        return str(address[0])
    try:
        pid, _, _ = _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    except OSError:
        return "unix"
    return f"pid:{pid}"


class ConnectionGate:
    """Counts open connections of one worker, in all and per peer (thread-safe)."""

    def __init__(self, limits: ServerLimits) -> None:
        if not limits.max_connections or not limits.max_per_peer:
            raise InvalidArgument("resolve the limits first (ServerLimits.resolved)")
        self.limits = limits
        self._lock = threading.Lock()
        self._total = 0
        self._per_peer: dict[str, int] = {}

    @property
    def open(self) -> int:
        return self._total

    def admit(self, peer: str) -> Busy | None:
        """Counts the connection in, or returns the refusal to answer it with."""
        with self._lock:
            if self._total >= self.limits.max_connections:
                return Busy(f"worker busy: {self._total} connections open, the limit is "
                            f"{self.limits.max_connections}; try another replica")
            held = self._per_peer.get(peer, 0)
            if held >= self.limits.max_per_peer:
                return Busy(f"worker busy: {held} connections open from {peer}, the limit per peer is "
                            f"{self.limits.max_per_peer}")
            self._total += 1
            self._per_peer[peer] = held + 1
        return None

    def release(self, peer: str) -> None:
        with self._lock:
            self._total -= 1
            held = self._per_peer.get(peer, 0) - 1
            if held > 0:
                self._per_peer[peer] = held
            else:
                self._per_peer.pop(peer, None)
