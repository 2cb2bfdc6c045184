"""Address rules that depend on nothing but the address: shared by config (may a role serve
without a token here?) and the transports (is this peer on this host?)."""
from __future__ import annotations

import ipaddress


def is_loopback_address(host: str) -> bool:
    """127.0.0.0/8, ::1 or ::ffff:127.x.y.z (a scope suffix such as %lo is ignored)."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
