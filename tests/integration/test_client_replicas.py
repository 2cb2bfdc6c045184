"""Issue 11, replicas: kill -9 a worker while clients write and read a `durable` directory with 2
replicas on 3 workers. Reads fail over to the other replica, a block write succeeds on the live
replicas when at least one acknowledged it, and nothing acknowledged is lost."""
from __future__ import annotations

import hashlib
import pathlib
import random
import threading

from curvine_py.client import CurvineClient
from curvine_py.core.domain import Policy, StorageClass
from tests.harness import Cluster, random_bytes

MiB = 1 << 20
WRITERS = 3
FILES_PER_WRITER = 14
KILL_AFTER = 8           # committed files before the kill
SIZE = 2 * MiB + 12345   # three 1 MiB blocks, the last one partial


def write_file(client: CurvineClient, path: str, data: bytes) -> None:
    with client.fs.open(path, "wb") as f:
        f.write(data)      # close commits: acknowledged once this returns


def read_file(client: CurvineClient, path: str) -> bytes:
    with client.fs.open(path) as f:
        return f.read()


def test_kill_9_a_worker_during_reads_and_writes_loses_nothing(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=3) as cluster:
        admin = cluster.client()
        admin.fs.mkdir("/durable")
        admin.fs.set_policy("/durable", Policy(storage_class=StorageClass.DURABLE, replicas=2, block_size=MiB))
        committed: dict[str, str] = {}        # path -> sha256 of what its writer was told is stored
        failed_writes: list[str] = []
        failed_reads: list[str] = []
        reads = [0]
        lock = threading.Lock()
        writers_done = threading.Event()
        enough = threading.Event()

        def writer(number: int) -> None:
            c = cluster.client()
            for i in range(FILES_PER_WRITER):
                path = f"/durable/w{number}-{i}.bin"
                data = random_bytes(SIZE, seed=number * 1000 + i)
                try:
                    write_file(c, path, data)
                except Exception as exc:   # noqa: BLE001 - every failure is collected and asserted on
                    with lock:
                        failed_writes.append(f"{path}: {exc!r}")
                    continue
                with lock:
                    committed[path] = hashlib.sha256(data).hexdigest()
                    if len(committed) >= KILL_AFTER:
                        enough.set()

        def reader(seed: int) -> None:
            c, rng = cluster.client(), random.Random(seed)
            while not writers_done.is_set():
                with lock:
                    paths = sorted(committed)
                if not paths:
                    writers_done.wait(0.01)
                    continue
                path = rng.choice(paths)
                try:
                    data = read_file(c, path)
                except Exception as exc:   # noqa: BLE001 - collected and asserted on
                    with lock:
                        failed_reads.append(f"{path}: {exc!r}")
                    continue
                with lock:
                    reads[0] += 1
                    if hashlib.sha256(data).hexdigest() != committed[path]:
                        failed_reads.append(f"{path}: wrong bytes")

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
        threads += [threading.Thread(target=reader, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        assert enough.wait(120), "the writers made no progress"
        cluster.kill_worker(1)                        # SIGKILL, mid-traffic
        for thread in threads[:WRITERS]:
            thread.join(300)
        writers_done.set()
        for thread in threads[WRITERS:]:
            thread.join(60)

        assert failed_reads == []
        assert failed_writes == []      # one live replica acknowledged every block
        assert len(committed) == WRITERS * FILES_PER_WRITER and reads[0] > 0
        # Every acknowledged write reads back exactly, with the dead worker still down.
        cluster.wait_for_live_workers(2)
        check = cluster.client()
        for path, digest in committed.items():
            assert hashlib.sha256(read_file(check, path)).hexdigest() == digest, path
        dead = cluster.worker_id(1)
        # Every block has a live copy; a copy on the dead worker (written before the kill, still
        # registered) is listed after them, so a reader tries it last.
        for path in committed:
            for block in check.master.get_blocks(check.fs.stat(path).ino).blocks:
                live = tuple(w for w in block.worker_ids if w != dead)
                assert live and block.worker_ids[:len(live)] == live, block
