"""A client whose membership view stays behind the workers' (a worker joined, then the master went
down before the client could refresh) never sees StaleEpoch: gets and exists answer a miss, puts
fail with Unavailable saying why (found by the soak, issue 11)."""
from __future__ import annotations

import pathlib

import pytest

from curvine_py.core import frames
from curvine_py.core.errors import StaleEpoch, Unavailable
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from tests.harness import Cluster, wait_until


def test_a_view_that_cannot_be_refreshed_answers_misses(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=2) as cluster:
        cluster.kill_worker(1)
        client = cluster.client(node="elsewhere")
        wait_until(lambda: len(client.membership.refresh().workers) == 1, 20, "a one-worker view")
        client.kv.put("k", b"v")
        assert client.kv.get("k") == b"v"
        view = client.membership.view()
        (worker,) = view.workers.values()
        cluster.restart_worker(1)                      # the epoch moves on; worker 0 learns it

        def worker_knows_a_newer_epoch() -> bool:
            try:
                client.io.call(worker, frames.Op.EXISTS, DataHeader(keys=["k"], epoch=view.epoch))
            except StaleEpoch:
                return True
            return False

        wait_until(worker_knows_a_newer_epoch, 20, "worker 0 at a newer epoch")
        cluster.kill_master()
        assert client.membership.refresh().epoch == view.epoch   # the master is down: the old view stays
        assert client.kv.get("k") is None                        # a miss, not StaleEpoch
        assert client.kv.get_many(["k", "other"]) == [None, None]
        assert client.kv.exists_prefix(["k"]) == 0
        with pytest.raises(Unavailable, match="newer membership"):
            client.kv.put("new", b"x")
