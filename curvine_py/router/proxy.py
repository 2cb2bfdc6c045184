"""The OpenAI-compatible HTTP front: routes `/v1/completions` and `/v1/chat/completions`, passes
`/v1/models` through, answers `/health` and `/metrics`.

A routed request's body is sent unchanged to the chosen replica and its response is passed back
as it arrives, chunk by chunk (server-sent events of a `stream: true` request included). A replica
that cannot be reached before it answered is marked unhealthy and the request goes to the policy's
next choice among the others; once it answered, its errors are the client's (a request is never
sent twice after a replica has started on it).
"""
from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
from aiohttp import web

from curvine_py.router.metrics import CONTENT_TYPE, RouterMetrics
from curvine_py.router.policies import Decision, NoReplica, Policy
from curvine_py.router.prompt import PromptError, PromptReader
from curvine_py.router.replicas import Replica, ReplicaSet

log = logging.getLogger(__name__)

# Headers not passed on (hop-by-hop, or recomputed by aiohttp).
_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
                  "transfer-encoding", "upgrade", "host", "content-length", "content-encoding"})
_UNREACHABLE = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
                ConnectionResetError)


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


def _forwarded(headers: Any) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _HOP}


class Proxy:
    def __init__(self, replicas: ReplicaSet, policy: Policy, reader: PromptReader, metrics: RouterMetrics,
                 session: aiohttp.ClientSession) -> None:
        self.replicas, self.policy, self.reader = replicas, policy, reader
        self.metrics, self.session = metrics, session
        self.last_decision: Decision | None = None    # for tests and the debug header

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/completions", self.generate)
        app.router.add_post("/v1/chat/completions", self.generate)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)

    def mark_down(self, replica: Replica, exc: BaseException) -> None:
        log.warning("replica %s unreachable (%s): marked unhealthy", replica.url, exc)
        replica.healthy = False
        self.metrics.failed.labels(replica=replica.url).inc()

    def _record(self, decision: Decision) -> None:
        self.last_decision = decision
        m = self.metrics
        m.routed.labels(replica=decision.replica.url, policy=decision.policy, reason=decision.reason).inc()
        m.prompt_tokens.labels(policy=decision.policy).inc(decision.prompt_tokens)
        for tier, tokens in decision.tiers.items():
            m.hit_tokens.labels(policy=decision.policy, tier=tier).inc(tokens)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return _error(400, "the body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        try:
            prompt = self.reader.read(request.path, body)
        except PromptError as exc:
            return _error(400, str(exc))
        tried: set[str] = set()
        while True:
            candidates = [r for r in self.replicas.healthy() if r.url not in tried]
            try:
                decision = await self.policy.choose(prompt, candidates)
            except NoReplica:
                return _error(503, "no healthy replica", "service_unavailable")
            replica = decision.replica
            tried.add(replica.url)
            prefill = decision.prefill_tokens
            replica.begin(prefill)
            try:
                upstream = await self.session.post(replica.url + request.path, data=raw,
                                                   headers=_forwarded(request.headers))
            except _UNREACHABLE as exc:
                replica.prefilled(prefill)
                replica.end()
                self.mark_down(replica, exc)
                continue
            self._record(decision)
            try:
                return await self._relay(request, upstream, replica, prefill, decision)
            finally:
                replica.end()
                upstream.release()

    async def _relay(self, request: web.Request, upstream: aiohttp.ClientResponse, replica: Replica,
                     prefill: int, decision: Decision) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                      headers=_forwarded(upstream.headers))
        response.headers["X-Curvine-Replica"] = replica.url
        response.headers["X-Curvine-Route"] = f"{decision.policy}/{decision.reason}"
        response.headers["X-Curvine-Predicted-Hit-Tokens"] = str(decision.hit_tokens)
        first = True
        try:
            async for chunk in upstream.content.iter_any():
                if first:
                    replica.prefilled(prefill)
                    await response.prepare(request)
                    first = False
                await response.write(chunk)
        except (aiohttp.ClientPayloadError, *_UNREACHABLE) as exc:
            log.warning("replica %s broke off a response (%s)", replica.url, exc)
            if first:
                replica.prefilled(prefill)
                return _error(502, f"replica {replica.url} broke off its response", "bad_gateway")
            raise   # the client sees the cut (the status line is already out)
        if first:
            replica.prefilled(prefill)
            await response.prepare(request)
        await response.write_eof()
        return response

    async def models(self, request: web.Request) -> web.StreamResponse:
        for replica in sorted(self.replicas.healthy(), key=lambda r: r.in_flight):
            try:
                async with self.session.get(replica.url + "/v1/models", headers=_forwarded(request.headers)) as up:
                    return web.Response(body=await up.read(), status=up.status,
                                        content_type=up.content_type or "application/json")
            except _UNREACHABLE as exc:
                self.mark_down(replica, exc)
        return _error(503, "no healthy replica", "service_unavailable")

    async def health(self, request: web.Request) -> web.Response:
        replicas = [{"url": r.url, "healthy": r.healthy, "in_flight": r.in_flight,
                     "queued_prefill_tokens": r.queued_prefill} for r in self.replicas.all()]
        ok = any(r["healthy"] for r in replicas)
        return web.json_response({"status": "ok" if ok else "no healthy replica", "policy": self.policy.name,
                                  "replicas": replicas}, status=200 if ok else 503)

    async def prometheus(self, request: web.Request) -> web.Response:
        for r in self.replicas.all():
            self.metrics.in_flight.labels(replica=r.url).set(r.in_flight)
            self.metrics.queued_prefill.labels(replica=r.url).set(r.queued_prefill)
            self.metrics.healthy.labels(replica=r.url).set(1 if r.healthy else 0)
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})
