"""The router's Prometheus metrics, in a registry of its own (never prometheus-client's global one).

Label values come from the replica set (its URLs, bounded by the deployment) and fixed vocabularies
(policy, reason, tier, event kind); never from a request.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST


class RouterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.routed = Counter("curvine_router_requests_total", "Requests routed, by replica, policy and reason",
                              ["replica", "policy", "reason"], registry=r)
        self.failed = Counter("curvine_router_upstream_errors_total",
                              "Requests a replica could not take (connection errors before a response)",
                              ["replica"], registry=r)
        self.prompt_tokens = Counter("curvine_router_prompt_tokens_total", "Prompt tokens routed, by policy",
                                     ["policy"], registry=r)
        self.hit_tokens = Counter("curvine_router_predicted_hit_tokens_total",
                                  "Prompt tokens predicted to hit a cache tier on the chosen replica",
                                  ["policy", "tier"], registry=r)
        self.in_flight = Gauge("curvine_router_in_flight", "Requests in flight per replica", ["replica"], registry=r)
        self.queued_prefill = Gauge("curvine_router_queued_prefill_tokens",
                                    "Prefill tokens routed to a replica that has not answered yet", ["replica"],
                                    registry=r)
        self.healthy = Gauge("curvine_router_replica_healthy", "1 if the replica answers its health check",
                             ["replica"], registry=r)
        self.events = Counter("curvine_router_kv_events_total", "KV events applied, by replica and kind",
                              ["replica", "kind"], registry=r)
        self.seq_gaps = Counter("curvine_router_kv_seq_gaps_total", "Seq gaps seen on a replica's KV events",
                                ["replica", "outcome"], registry=r)
        self.publisher_restarts = Counter("curvine_router_kv_publisher_restarts_total",
                                          "Times a replica's KV event seq went back (its index is dropped)",
                                          ["replica"], registry=r)
        self.last_seq = Gauge("curvine_router_kv_last_seq", "The last KV event seq applied, by replica",
                              ["replica"], registry=r)
        self.index_blocks = Gauge("curvine_router_kv_index_blocks", "Distinct block hashes in the KV index",
                                  registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
