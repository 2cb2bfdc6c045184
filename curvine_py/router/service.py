"""The router assembled: replicas (flags or DNS), one KV event subscriber per replica, the health
checker, the policy and the HTTP front, started and stopped together."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import zmq.asyncio
from aiohttp import web

from curvine_py.router.index import KVIndex
from curvine_py.router.l2 import L2Lookup
from curvine_py.router.metrics import RouterMetrics
from curvine_py.router.policies import KVAware, KVSettings, Policy, PrefixAware, RoundRobin
from curvine_py.router.prompt import PromptReader
from curvine_py.router.proxy import Proxy
from curvine_py.router.replicas import Replica, ReplicaSet, Resolver, normalise_url, resolve_a, watch_dns
from curvine_py.router.subscriber import Subscriber

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RouterSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    policy: str = "kv"
    replicas: list[str] = field(default_factory=list)
    kv_events: list[str] = field(default_factory=list)     # one per --replica, in order
    kv_replay: list[str] = field(default_factory=list)     # one per --replica, in order
    replicas_dns: str | None = None
    dns_interval_s: float = 10.0
    kv_events_port: int | None = None
    kv_replay_port: int | None = None
    kv_topic: str = ""
    tokenizer: str | None = None
    chat_template: str = "chatml"
    prefix_blocks: int = 4
    prefix_chars: int = 1024
    load_factor: float = 1.25
    kv: KVSettings = field(default_factory=KVSettings)
    health_interval_s: float = 5.0
    connect_timeout_s: float = 3.0
    replay_timeout_s: float = 2.0


def build_replicas(settings: RouterSettings) -> list[Replica]:
    if len(settings.kv_events) > len(settings.replicas) or len(settings.kv_replay) > len(settings.replicas):
        raise ValueError("--kv-events and --kv-replay pair with --replica in order: more of them than replicas")
    replicas = []
    for i, url in enumerate(settings.replicas):
        events = settings.kv_events[i] if i < len(settings.kv_events) else None
        replay = settings.kv_replay[i] if i < len(settings.kv_replay) else None
        replicas.append(Replica(normalise_url(url), kv_events=events or None, kv_replay=replay or None))
    return replicas


def build_policy(settings: RouterSettings, index: KVIndex, reader: PromptReader, l2: L2Lookup | None) -> Policy:
    if settings.policy == "round-robin":
        return RoundRobin()
    if settings.policy == "prefix":
        return PrefixAware(block_size=settings.kv.block_size, blocks=settings.prefix_blocks,
                           chars=settings.prefix_chars, load_factor=settings.load_factor)
    if settings.policy == "kv":
        if reader.tokenizer is None:
            raise ValueError("--policy kv needs --tokenizer FILE (a tokenizer.json) to hash prompts as vLLM does")
        return KVAware(index, settings.kv, l2)
    raise ValueError(f"--policy {settings.policy!r}: round-robin, prefix or kv")


class Router:
    def __init__(self, settings: RouterSettings, *, l2: L2Lookup | None = None, resolver: Resolver = resolve_a,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        if not settings.replicas and not settings.replicas_dns:
            raise ValueError("no replicas: give --replica URL (repeatable) or --replicas-dns NAME:PORT")
        self.settings = settings
        self.metrics = RouterMetrics()
        self.index = KVIndex()
        self.reader = PromptReader.from_file(settings.tokenizer, chat_template=settings.chat_template)
        self.policy = build_policy(settings, self.index, self.reader, l2)
        self.replicas = ReplicaSet()
        self.subscribers: dict[str, Subscriber] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._background: list[asyncio.Task[None]] = []
        self._resolver, self._sleep = resolver, sleep
        self._context: zmq.asyncio.Context | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.proxy: Proxy | None = None
        self.port = settings.port
        self._initial = build_replicas(settings)

    # -- subscribers follow the replica set -------------------------------------------------------
    def _added(self, replica: Replica) -> None:
        if replica.kv_events is None or self.settings.policy != "kv" or self._context is None:
            return
        subscriber = Subscriber(replica.url, replica.kv_events, self.index, replay=replica.kv_replay,
                                topic=self.settings.kv_topic, block_size=self.settings.kv.block_size,
                                context=self._context, metrics=self.metrics,
                                replay_timeout_s=self.settings.replay_timeout_s)
        self.subscribers[replica.url] = subscriber
        self._tasks[replica.url] = asyncio.get_running_loop().create_task(subscriber.run())

    def _removed(self, replica: Replica) -> None:
        task = self._tasks.pop(replica.url, None)
        if task is not None:
            task.cancel()
        self.subscribers.pop(replica.url, None)
        self.index.clear(replica.url)

    # -- health ------------------------------------------------------------------------------
    async def check_health(self) -> None:
        """One round of health checks; a replica that comes back starts its KV stream over (it
        restarted, or was away long enough that its cache is unknown)."""
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(total=self.settings.connect_timeout_s)
        for replica in self.replicas.all():
            try:
                async with self._session.get(replica.url + "/health", timeout=timeout) as response:
                    ok = response.status == 200
            except (aiohttp.ClientError, OSError, TimeoutError):
                ok = False
            if ok and not replica.healthy:
                log.info("replica %s is healthy again", replica.url)
                subscriber = self.subscribers.get(replica.url)
                if subscriber is not None:
                    subscriber.forget("replica came back")
            elif not ok and replica.healthy:
                log.warning("replica %s failed its health check", replica.url)
            replica.healthy = ok

    async def _health_loop(self) -> None:
        while True:
            await self._sleep(self.settings.health_interval_s)
            await self.check_health()

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> int:
        self._context = zmq.asyncio.Context()
        self.replicas.on_added.append(self._added)
        self.replicas.on_removed.append(self._removed)
        for replica in self._initial:
            self.replicas.add(replica)
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(
            total=None, sock_connect=self.settings.connect_timeout_s), auto_decompress=False)
        self.proxy = Proxy(self.replicas, self.policy, self.reader, self.metrics, self._session)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        self.proxy.routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        await site.start()
        addresses = self._runner.addresses
        if addresses:
            self.port = int(addresses[0][1])
        loop = asyncio.get_running_loop()
        self._background.append(loop.create_task(self._health_loop()))
        if self.settings.replicas_dns:
            self._background.append(loop.create_task(watch_dns(
                self.replicas, self.settings.replicas_dns, interval_s=self.settings.dns_interval_s,
                events_port=self.settings.kv_events_port, replay_port=self.settings.kv_replay_port,
                resolver=self._resolver, sleep=self._sleep)))
        log.info("router on %s:%d, policy %s, %d replicas", self.settings.host, self.port, self.policy.name,
                 len(self.replicas))
        return self.port

    async def stop(self) -> None:
        tasks = self._background + list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._background.clear()
        self._tasks.clear()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        if self._context is not None:
            self._context.destroy(linger=0)
