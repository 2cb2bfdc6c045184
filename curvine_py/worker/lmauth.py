"""Who may use a worker's lm:// port. LMCache's `lm://` protocol carries no credentials, and the
port relays through the worker's own authenticated client: whoever reaches it reads and plants KV
chunks for the whole cluster (issue 11). So:

- it binds a node-local address (loopback) by default: the vLLM/LMCache engines of this node;
- a reachable address is refused at start unless told `--lm-insecure` (the operator accepts that
  anyone who reaches the port is trusted; in a cluster without a token `--insecure` also says so);
- an optional allow-list of peer networks (`--lm-allow CIDR`, repeatable) is checked at accept:
  any other peer is closed before a byte is read;
- on loopback, every local user could otherwise reach it (issue 29: `nobody` read and planted KV
  data of a token cluster, and its idle connections used up the port's connection cap). In a
  cluster with a token, a loopback peer must be a local user the operator named: the worker's own
  user and `--lm-allow-uid UID` (repeatable, e.g. the uid vLLM runs as); the owner of the peer
  socket is read from the kernel's socket table (transport/peeruid.py). Without a token the
  cluster is open anyway, unless `--lm-allow-uid` is given.
"""
from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from curvine_py.core.errors import InvalidArgument, PermissionDenied
from curvine_py.core.addresses import is_loopback_address
from curvine_py.transport.blocking import is_loopback_peer
from curvine_py.transport.peeruid import peer_uid

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def check_lm_bind(host: str, *, token: str, lm_insecure: bool, insecure: bool) -> None:
    """Refuses a reachable lm:// address unless the operator said it is meant (see above)."""
    if is_loopback_address(host):
        return
    if lm_insecure or (not token and insecure):
        return
    raise InvalidArgument(
        f"refusing to serve lm:// on {host or 'every address'}: LMCache's protocol has no credentials, "
        "so anyone reaching the port could read and plant KV chunks"
        + (" despite the cluster's token" if token else "")
        + "; bind it node-local (the default --lm-host 127.0.0.1) or pass --lm-insecure "
        "(and restrict peers with --lm-allow CIDR)")


def parse_networks(specs: Sequence[str]) -> tuple[Network, ...]:
    networks = []
    for spec in specs:
        try:
            networks.append(ipaddress.ip_network(spec.strip(), strict=False))
        except ValueError:
            raise InvalidArgument(f"--lm-allow {spec!r} is not a network (CIDR such as 10.0.0.0/8)") from None
    return tuple(networks)


@dataclass(frozen=True, slots=True)
class PeerFilter:
    """Peers allowed by network; no networks = every peer."""
    networks: tuple[Network, ...] = ()

    def check(self, peer_ip: str) -> None:
        """PermissionDenied for a peer outside every allowed network."""
        if not self.networks:
            return
        try:
            address = ipaddress.ip_address(peer_ip.split("%", 1)[0])
        except ValueError:
            raise PermissionDenied(f"peer {peer_ip!r} has no IP address") from None
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if not any(address.version == net.version and address in net for net in self.networks):
            raise PermissionDenied(f"peer {peer_ip} is not in an allowed network")


def parse_uids(specs: Sequence[str]) -> frozenset[int]:
    uids = set()
    for spec in specs:
        text = spec.strip()
        if not text.isdigit():
            raise InvalidArgument(f"--lm-allow-uid {spec!r} is not a numeric uid")
        uids.add(int(text))
    return frozenset(uids)


@dataclass(frozen=True, slots=True)
class LocalUsers:
    """Local users allowed on loopback; None = every user (a cluster without a token)."""
    uids: frozenset[int] | None = None
    uid_of: Callable[[socket.socket], int | None] = peer_uid

    @classmethod
    def for_cluster(cls, *, token: str, allow_uids: Sequence[str]) -> LocalUsers:
        extra = parse_uids(allow_uids)
        if not token and not extra:
            return cls(None)
        return cls(frozenset({os.geteuid(), *extra}))

    def check(self, conn: socket.socket) -> None:
        """PermissionDenied for a loopback peer owned by a user not allowed; peers on other hosts are
        the network filter's (PeerFilter)."""
        if self.uids is None or not is_loopback_peer(conn):
            return
        uid = self.uid_of(conn)
        if uid not in self.uids:
            who = "an unknown local user" if uid is None else f"local uid {uid}"
            raise PermissionDenied(f"{who} may not use lm:// (allowed: uid "
                                   f"{', '.join(map(str, sorted(self.uids)))}; add --lm-allow-uid)")
