"""The replicas behind the router, their load and their discovery.

Load per replica (what the KV policy weighs a hit against): requests in flight, and prefill tokens
queued (the prompt tokens not predicted to hit, counted from routing until the replica's first
response byte). Replicas come from `--replica URL` flags or from the A records of a Kubernetes
headless Service (`--replicas-dns NAME:PORT`), resolved again every `--dns-interval-s`.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Replica:
    url: str                          # base URL, e.g. http://10.0.0.5:8000 (also its id)
    kv_events: str | None = None      # tcp://host:5557 (its vLLM KV events PUB socket)
    kv_replay: str | None = None      # tcp://host:5558 (its replay ROUTER socket)
    healthy: bool = True
    in_flight: int = 0
    queued_prefill: int = 0

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.url).hostname or ""

    def begin(self, prefill_tokens: int) -> None:
        self.in_flight += 1
        self.queued_prefill += prefill_tokens

    def prefilled(self, prefill_tokens: int) -> None:
        self.queued_prefill = max(0, self.queued_prefill - prefill_tokens)

    def end(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)


def normalise_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"replica URL {url!r}: expected http://host:port")
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


class ReplicaSet:
    def __init__(self, replicas: Iterable[Replica] = ()) -> None:
        self._replicas: dict[str, Replica] = {}
        self.on_added: list[Callable[[Replica], None]] = []
        self.on_removed: list[Callable[[Replica], None]] = []
        for replica in replicas:
            self.add(replica)

    def __len__(self) -> int:
        return len(self._replicas)

    def get(self, url: str) -> Replica | None:
        return self._replicas.get(url)

    def all(self) -> list[Replica]:
        return list(self._replicas.values())

    def healthy(self) -> list[Replica]:
        return [r for r in self._replicas.values() if r.healthy]

    def add(self, replica: Replica) -> None:
        if replica.url in self._replicas:
            return
        self._replicas[replica.url] = replica
        for callback in self.on_added:
            callback(replica)

    def remove(self, url: str) -> None:
        replica = self._replicas.pop(url, None)
        if replica is not None:
            for callback in self.on_removed:
                callback(replica)

    def replace(self, replicas: Iterable[Replica]) -> None:
        """Makes the set exactly `replicas` (by URL), keeping the load of those that stay."""
        wanted = {r.url: r for r in replicas}
        for url in list(self._replicas):
            if url not in wanted:
                log.info("replica %s left the service", url)
                self.remove(url)
        for url, replica in wanted.items():
            if url not in self._replicas:
                log.info("replica %s joined the service", url)
                self.add(replica)


Resolver = Callable[[str, int], Awaitable[list[str]]]


async def resolve_a(name: str, port: int) -> list[str]:
    """The IPv4/IPv6 addresses of `name` (a headless Service has one A record per ready pod)."""
    infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def dns_replicas(addresses: Iterable[str], port: int, events_port: int | None,
                 replay_port: int | None) -> list[Replica]:
    replicas = []
    for address in addresses:
        host = f"[{address}]" if ":" in address else address
        replicas.append(Replica(f"http://{host}:{port}",
                                kv_events=None if events_port is None else f"tcp://{host}:{events_port}",
                                kv_replay=None if replay_port is None else f"tcp://{host}:{replay_port}"))
    return replicas


async def watch_dns(replicas: ReplicaSet, target: str, *, interval_s: float, events_port: int | None,
                    replay_port: int | None, resolver: Resolver = resolve_a,
                    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Keeps `replicas` equal to the Service's A records. A failed lookup keeps the last set."""
    name, _, port_text = target.rpartition(":")
    if not name or not port_text.isdigit():
        raise ValueError(f"--replicas-dns {target!r}: expected NAME:PORT")
    port = int(port_text)
    while True:
        try:
            addresses = await resolver(name, port)
        except OSError as exc:
            log.warning("resolving %s failed (%s); keeping %d replicas", name, exc, len(replicas))
        else:
            if addresses:
                replicas.replace(dns_replicas(addresses, port, events_port, replay_port))
            else:
                log.warning("%s has no A records; keeping %d replicas", name, len(replicas))
        await sleep(interval_s)
