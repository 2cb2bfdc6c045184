"""Where the LMCache plugins find the cluster: plugin parameters first, then CURVINE_* env."""
from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from curvine_py.client import CurvineClient
from curvine_py.core.errors import InvalidArgument

DEFAULT_PARALLEL = 4   # requests in flight per connector (one chunk each): threads and pooled connections


def parallelism(params: Mapping[str, Any]) -> int:
    return max(1, int(params.get("num_workers", DEFAULT_PARALLEL)))


def client_from(params: Mapping[str, Any]) -> CurvineClient:
    """Builds the client from `master`, `token`, `node`, `replicas`, `timeout_s`, `num_workers`,
    `batch_streams` (plugin params or env). Every parallel request keeps its pooled connection to a
    worker; a batched get splits each owner's keys over `batch_streams` connections (pipelined)."""
    master = params.get("master") or os.environ.get("CURVINE_MASTER")
    if not master:
        raise InvalidArgument("curvine LMCache plugin needs `master` (HOST:PORT) or CURVINE_MASTER")
    client = CurvineClient(
        str(master),
        token=str(params.get("token") or os.environ.get("CURVINE_TOKEN", "")),
        node=str(params.get("node") or os.environ.get("CURVINE_NODE") or socket.gethostname()),
        kv_replicas=int(params.get("replicas", 1)),
        data_timeout_s=float(params.get("timeout_s", 10.0)),
        connections_per_worker=max(parallelism(params), int(params.get("batch_streams", 0))),
    )
    if "batch_streams" in params:
        streams = int(params["batch_streams"])
        if streams < 1:
            raise InvalidArgument(f"batch_streams {streams}: at least 1")
        client.kv.batch_streams = streams
    return client
