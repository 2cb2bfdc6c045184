"""What a standby master serves while another master leads the same metadata database: every call,
whatever its method, is answered UNAVAILABLE and names the leader, so clients, workers and mounts
(rpc/leader.py) move there within their own deadline.

The contract (the calling side depends on it):
- status UNAVAILABLE, details "not the leader; the leader is HOST:PORT" (or "...; no leader is
  known yet" while the database names none);
- trailing metadata `curvine-leader` = "HOST:PORT" of the leader, or "" when none is known.

A follower executes nothing, so every call it refuses is safe for the caller to retry elsewhere.
It holds no database session for serving: the leader's address comes from `leader_hint`, which the
election loop (master/standby.py) refreshes while it waits for the advisory lock.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from curvine_py.rpc.leader import LEADER_METADATA

# The trailing-metadata key the calling side reads (rpc/leader.py): one definition of the contract.
LEADER_METADATA_KEY = LEADER_METADATA
FOLLOWER_THREADS = 4    # it only answers refusals: no handler ever blocks


class LeaderHint:
    """The leader's address as last read from the database ('' = unknown), shared between the
    election loop (writer) and the follower's handlers (readers)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._address = ""

    def set(self, address: str) -> None:
        with self._lock:
            self._address = address

    def get(self) -> str:
        with self._lock:
            return self._address


def refusal(leader: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The details text and trailing metadata of a follower's answer."""
    text = f"not the leader; the leader is {leader}" if leader else "not the leader; no leader is known yet"
    return text, ((LEADER_METADATA_KEY, leader),)


class _RefuseEverything(grpc.GenericRpcHandler):
    def __init__(self, leader_hint: Callable[[], str]) -> None:
        self._leader_hint = leader_hint

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        def refuse(_request: bytes, context: grpc.ServicerContext) -> bytes:
            text, metadata = refusal(self._leader_hint())
            context.set_trailing_metadata(metadata)
            context.abort(grpc.StatusCode.UNAVAILABLE, text)
            raise AssertionError("abort returned")   # grpc's abort always raises

        # Raw bytes in and out: a refusal never needs to parse the request.
        return grpc.unary_unary_rpc_method_handler(refuse, request_deserializer=None, response_serializer=None)


def build_follower_server(leader_hint: Callable[[], str], *, options: Any = ()) -> grpc.Server:
    """A gRPC server that refuses every unary call as described above (the Master service has no
    streaming methods). The caller adds the port (master/service.py add_port) and starts it."""
    server = grpc.server(ThreadPoolExecutor(max_workers=FOLLOWER_THREADS, thread_name_prefix="master-follower"),
                         handlers=[_RefuseEverything(leader_hint)], options=list(options))
    return server
