"""The setting of curvine-py's LMCache end-to-end tests: two network namespaces (two "nodes" for
engines) and a cluster (master + 2 workers, each with an `lm://` port) bound to the root-side bridge
address, so every byte between an engine and the cluster crosses a veth link.

    with curvine_lab(tmp_path) as lab:
        keys = write(lab, plugin_config(lab), seed=1)        # engine A in namespace 0
        reader = read(lab, plugin_config(lab), seed=1)       # fresh engine B in namespace 1, CPU tier off
"""
from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tests.harness import Cluster, wait_until
from tests.lmcache.harness import EngineJob, EngineResult, Model, engine_config, run_engine
from tests.netns import NetnsLab, network_namespaces

TOKEN = "lmcache-test-token"
TOKENS = 1024
CHUNK = 256
MODEL = Model()


@dataclass
class Lab:
    net: NetnsLab
    cluster: Cluster

    @property
    def writer(self) -> list[str]:
        """Prefix running a command in namespace 0 (engine A's node)."""
        return self.net[0].prefix

    @property
    def reader(self) -> list[str]:
        """Prefix running a command in namespace 1 (engine B's node)."""
        return self.net[1].prefix

    def lm_url(self, index: int) -> str:
        worker = self.cluster.workers[index]
        assert worker is not None
        return f"lm://{worker.field('lm')}"

    def worker_index(self, worker_id: str) -> int:
        for index in range(len(self.cluster.workers)):
            if self.cluster.worker_id(index) == worker_id:
                return index
        raise KeyError(worker_id)

    def owner_index(self, key: str) -> int:
        """Which worker (index) owns `key` (rendezvous rank 0)."""
        return self.worker_index(self.cluster.client().kv.owners(key)[0].worker_id)

    def restart_worker(self, index: int) -> None:
        """kill -9, then a new process on the same data dir and data-plane port, registered."""
        self.cluster.kill_worker(index)
        self.cluster.restart_worker(index)
        self.cluster.wait_for_live_workers(len(self.cluster.workers))


@contextlib.contextmanager
def curvine_lab(root: pathlib.Path, *, workers: int = 2, capacity: str = "",
                worker_args: Sequence[str] = ()) -> Iterator[Lab]:
    with network_namespaces(2) as net, Cluster(root, workers=workers, token=TOKEN, host=net.root_address,
                                               capacity=capacity,
                                               worker_args=["--lm-port", "-1", "--lm-host", net.root_address,
                                                            "--lm-insecure", *worker_args]) as cluster:
        cluster.wait_for_live_workers(workers)
        yield Lab(net, cluster)


def plugin_config(lab: Lab, **more: Any) -> dict[str, Any]:
    """Way 3a: the in-process native plugin, loaded by LMCache's remote_storage_plugins."""
    return engine_config(plugins=["curvine"], extra_config={
        "remote_storage_plugin.curvine.module_path": "curvine_py.lmcache.connector",
        "remote_storage_plugin.curvine.class_name": "CurvineConnectorAdapter",
        "remote_storage_plugin.curvine.master": lab.cluster.master_address,
        "remote_storage_plugin.curvine.token": TOKEN,
    }, **more)


def lm_config(lab: Lab, worker: int, **more: Any) -> dict[str, Any]:
    """Way 2: stock LMCache's lm:// connector against worker `worker`'s lm port."""
    return engine_config(remote_url=lab.lm_url(worker), **more)


def entries(result: EngineResult | list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Every entry of op `name`, in order (a job may run an op several times)."""
    ops = result.data["ops"] if isinstance(result, EngineResult) else result
    return [e for e in ops if e["op"] == name]


def assert_full_hit(retrieve: dict[str, Any], tokens: int = TOKENS) -> None:
    assert retrieve["hit_tokens"] == tokens, retrieve
    assert retrieve["prefix_mask"] is True, retrieve
    assert retrieve["mismatched_tokens"] == 0, retrieve
    assert retrieve["bit_exact"] is True, retrieve


def assert_prefix_hit(retrieve: dict[str, Any], tokens: int) -> None:
    """Exactly `tokens` tokens retrieved (a prefix), bit-exact; nothing past the first miss."""
    assert retrieve["hit_tokens"] == tokens, retrieve
    assert retrieve["prefix_mask"] is True, retrieve
    assert retrieve["mismatched_tokens"] == 0, retrieve


def write(lab: Lab, config: dict[str, Any], seed: int, tokens: int = TOKENS) -> list[str]:
    """Engine A (namespace 0) stores `tokens` tokens and waits for its puts; returns the chunk keys."""
    writer = run_engine(EngineJob(config, ["keys", "store", "flush", "lookup"], tokens, seed, model=MODEL),
                        prefix=lab.writer)
    assert entries(writer, "flush")[0]["put_failed"] == 0, writer.describe()
    assert entries(writer, "lookup")[0]["hit_tokens"] == tokens
    keys: list[str] = entries(writer, "keys")[0]["keys"]
    assert len(keys) == tokens // CHUNK
    return keys


def read(lab: Lab, config: dict[str, Any], seed: int, ops: Sequence[str] = ("miss", "lookup", "retrieve"),
         tokens: int = TOKENS) -> EngineResult:
    """A fresh engine B (namespace 1) with its CPU tier off: every hit comes from the cluster."""
    return run_engine(EngineJob({**config, "local_cpu": False}, list(ops), tokens, seed, model=MODEL),
                      prefix=lab.reader)


def wait_stored(lab: Lab, keys: Sequence[str], timeout: float = 10.0) -> None:
    kv = lab.cluster.client().kv
    wait_until(lambda: kv.exists_prefix(list(keys), pin=False) == len(keys), timeout, f"{len(keys)} keys stored")
