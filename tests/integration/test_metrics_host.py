"""/metrics and the status page bind their own address (--metrics-host), not the role's --host:
an operator keeps them on a management network (here 127.0.0.2) while the service port stays
where clients reach it (127.0.0.1). The other address is refused."""
from __future__ import annotations

import pathlib
import socket
import urllib.request

import pytest

from tests.harness import Cluster

TOKEN = "m" * 32
OBSERVE = "127.0.0.2"


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as reply:
        body: bytes = reply.read()
        return body


def _refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_metrics_and_status_bind_the_metrics_host(tmp_path: pathlib.Path) -> None:
    observe = ["--metrics-port", "-1", "--metrics-host", OBSERVE]
    with Cluster(tmp_path, workers=1, token=TOKEN, master_args=[*observe, "--status-port", "-1"],
                 worker_args=[*observe, "--lm-port", "-1"]) as cluster:
        cluster.wait_for_live_workers(1)
        master, worker = cluster.master, cluster.workers[0]
        assert master is not None and worker is not None
        assert master.address.startswith("127.0.0.1:")           # the service stays on --host
        for role, name in ((master, "metrics"), (master, "status"), (worker, "metrics")):
            host, port = role.field(name).rsplit(":", 1)
            assert host == OBSERVE, (name, role.ready)
            assert _refused("127.0.0.1", int(port)), f"{name} also answers on --host"
        assert b"curvine_" in _get(f"http://{master.field('metrics')}/metrics")
        assert b"curvine_" in _get(f"http://{worker.field('metrics')}/metrics")
        assert b"<html" in _get(f"http://{master.field('status')}/").lower()


@pytest.mark.parametrize("role", ["master", "worker"])
def test_metrics_host_defaults_to_the_roles_host(tmp_path: pathlib.Path, role: str) -> None:
    args = ["--metrics-port", "-1"]
    with Cluster(tmp_path, workers=1, token=TOKEN, master_args=args if role == "master" else [],
                 worker_args=[*args, "--lm-port", "-1"] if role == "worker" else ["--lm-port", "-1"]) as cluster:
        process = cluster.master if role == "master" else cluster.workers[0]
        assert process is not None
        assert process.field("metrics").startswith("127.0.0.1:")
