"""Network namespaces for tests: N isolated "hosts" on a private subnet, joined to this (root)
namespace, so a test can run clients or servers as if on separate machines (own loopback, own
addresses, traffic crossing real veth links) without leaving this box.

    with network_namespaces(2) as lab:
        lab.root_address                # "10.77.0.1": bind servers here to serve the namespaces
        lab[0].address                  # "10.77.0.2"
        lab[0].prefix                   # ["ip", "netns", "exec", "<name>"]: prepend to any argv
        lab[1].run(["python3", "-c", "..."])

Layout: one Linux bridge in the root namespace holding `<subnet>.1/24`; per namespace a veth pair,
the root end enslaved to the bridge, the other end moved into the namespace as `<subnet>.(2+i)/24`,
plus `lo` up. Namespaces reach the root address and each other (through the bridge); there is no
default route, so nothing in a namespace can reach anything beyond the subnet.

Resource handling: names carry a per-run random token (parallel runs never collide); the subnet
is the first 10.77.N.0/24 not already on a root-namespace interface. Every resource is registered
for teardown as soon as it exists, so a failure halfway through creation, or an exception in the
`with` body, still removes everything: processes still inside our namespaces (all started by the
test that owns them) are killed, then the namespaces (taking the veth pairs with them), then the
bridge. Needs root (CAP_NET_ADMIN) and iproute2.
"""
from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

IP = shutil.which("ip") or "/usr/sbin/ip"
SUBNET_BASE = "10.77"
SUBNET_LOCK = "/tmp/curvine-netns-subnets.lock"   # shared by every test process of this machine


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([IP, *args], capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def netns_supported() -> tuple[bool, str]:
    """(usable, reason). Usable = root and iproute2 present. With CURVINE_REQUIRE_NETNS set (CI),
    unusable namespaces are an error, so the multi-node tests can never be skipped silently."""
    reason = ""
    if os.geteuid() != 0:
        reason = "network namespaces need root (CAP_NET_ADMIN)"
    elif not os.path.exists(IP):
        reason = "iproute2 (`ip`) is not installed"
    if reason and os.environ.get("CURVINE_REQUIRE_NETNS"):
        raise RuntimeError(f"CURVINE_REQUIRE_NETNS is set but {reason}")
    return not reason, reason


def requires_netns() -> pytest.MarkDecorator:
    """Marks tests that create network namespaces: skipped where they cannot run, an error in CI
    (CURVINE_REQUIRE_NETNS, see netns_supported)."""
    usable, reason = netns_supported()
    return pytest.mark.skipif(not usable, reason=reason)


@dataclass(frozen=True)
class Namespace:
    name: str
    address: str  # this namespace's address on the subnet
    veth_root: str
    veth_ns: str

    @property
    def prefix(self) -> list[str]:
        """Prepend to an argv to run it inside this namespace."""
        return [IP, "netns", "exec", self.name]

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("timeout", 60)
        kwargs.setdefault("check", False)
        return subprocess.run([*self.prefix, *argv], **kwargs)  # noqa: PLW1510 - check is set above

    def pids(self) -> list[int]:
        out = _ip("netns", "pids", self.name, check=False).stdout
        return [int(p) for p in out.split()]


@dataclass(frozen=True)
class NetnsLab:
    namespaces: tuple[Namespace, ...]
    bridge: str
    subnet: str  # e.g. "10.77.0.0/24"
    root_address: str  # the root namespace's address on the subnet (on the bridge)

    def __getitem__(self, index: int) -> Namespace:
        return self.namespaces[index]

    def __len__(self) -> int:
        return len(self.namespaces)

    def __iter__(self) -> Iterator[Namespace]:
        return iter(self.namespaces)


def _used_subnets() -> set[str]:
    used = set()
    for line in _ip("-o", "-4", "addr", "show").stdout.splitlines():
        fields = line.split()
        if "inet" in fields:
            iface = ipaddress.ip_interface(fields[fields.index("inet") + 1])
            used.add(str(ipaddress.ip_network(f"{iface.ip}/24", strict=False)))
    return used


@contextlib.contextmanager
def _subnet_lock() -> Iterator[None]:
    with open(SUBNET_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _pick_subnet() -> ipaddress.IPv4Network:
    used = _used_subnets()
    for third in range(256):
        net = ipaddress.IPv4Network(f"{SUBNET_BASE}.{third}.0/24")
        if str(net) not in used:
            return net
    raise RuntimeError(f"no free /24 left in {SUBNET_BASE}.0.0/16")


def _kill_namespace_processes(name: str) -> None:
    for pid in (int(p) for p in _ip("netns", "pids", name, check=False).stdout.split()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _delete_namespace(name: str) -> None:
    _kill_namespace_processes(name)
    _ip("netns", "del", name, check=False)


@contextlib.contextmanager
def network_namespaces(count: int, *, subnet: str | None = None) -> Iterator[NetnsLab]:
    """Creates `count` namespaces joined to the root namespace (see the module docstring)."""
    if not 1 <= count <= 200:
        raise ValueError("between 1 and 200 namespaces")
    ok, reason = netns_supported()
    if not ok:
        raise RuntimeError(reason)
    token = secrets.token_hex(3)  # interface names stay <= 15 chars: "cv" + 6 + "r" + digits
    bridge = f"cv{token}br"
    with contextlib.ExitStack() as cleanup:
        # Tests run in parallel (pytest-xdist): choosing a free subnet and taking it (the bridge's
        # address) happen under one lock, so two labs never pick the same one.
        with _subnet_lock():
            net = ipaddress.IPv4Network(subnet) if subnet else _pick_subnet()
            hosts = list(net.hosts())
            if len(hosts) < count + 1:
                raise ValueError(f"subnet {net} too small for {count} namespaces")
            root_address = str(hosts[0])
            _ip("link", "add", "name", bridge, "type", "bridge")
            cleanup.callback(_ip, "link", "del", bridge, check=False)
            _ip("addr", "add", f"{root_address}/{net.prefixlen}", "dev", bridge)
        _ip("link", "set", bridge, "up")
        spaces = []
        for i in range(count):
            ns = Namespace(name=f"curvine-{token}-{i}", address=str(hosts[1 + i]),
                           veth_root=f"cv{token}r{i}", veth_ns=f"cv{token}n{i}")
            _ip("netns", "add", ns.name)
            cleanup.callback(_delete_namespace, ns.name)
            _ip("link", "add", ns.veth_root, "type", "veth", "peer", "name", ns.veth_ns)
            # Deleting either end deletes the pair; until the peer moves, the root end is ours.
            cleanup.callback(_ip, "link", "del", ns.veth_root, check=False)
            _ip("link", "set", ns.veth_ns, "netns", ns.name)
            _ip("link", "set", ns.veth_root, "master", bridge)
            _ip("link", "set", ns.veth_root, "up")
            _ip("-n", ns.name, "addr", "add", f"{ns.address}/{net.prefixlen}", "dev", ns.veth_ns)
            _ip("-n", ns.name, "link", "set", ns.veth_ns, "up")
            _ip("-n", ns.name, "link", "set", "lo", "up")
            spaces.append(ns)
        yield NetnsLab(tuple(spaces), bridge, str(net), root_address)


def leftovers(token_prefix: str = "curvine-") -> list[str]:
    """Namespaces named by this module that still exist (for tests of the teardown)."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(token_prefix)]
