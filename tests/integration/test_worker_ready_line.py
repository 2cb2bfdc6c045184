"""The worker's ready line says where its ports listen: lm:// on every address reads as the wildcard,
not as the one address the host name resolves to (127.0.1.1 on a stock Debian host)."""
from __future__ import annotations

import pathlib
import socket

from curvine_py.core import lmproto
from tests.harness import Cluster


def test_lm_on_every_address_is_shown_as_the_wildcard_and_answers_there(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1, worker_args=["--lm-port", "-1", "--lm-host", "0.0.0.0",
                                                   "--lm-insecure"]) as cluster:
        cluster.wait_for_live_workers(1)
        host, port = cluster.workers[0].field("lm").rsplit(":", 1)   # type: ignore[union-attr]
        assert host == "0.0.0.0"
        with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as sock:
            sock.sendall(lmproto.encode_request(lmproto.Command.HEALTH, ""))
            assert sock.recv(lmproto.REPLY_SIZE) == lmproto.SUCCESS_REPLY


def test_lm_on_loopback_is_shown_as_bound(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1, worker_args=["--lm-port", "-1"]) as cluster:
        cluster.wait_for_live_workers(1)
        assert cluster.workers[0].field("lm").startswith("127.0.0.1:")   # type: ignore[union-attr]
