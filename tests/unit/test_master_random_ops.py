"""Random sequences of namespace mutations (create, mkdir, link, unlink, rmdir, rename with flags,
truncate, block commits), each followed by the store's consistency check: whatever succeeds or
fails, link counts, parents, blocks and dentries must stay coherent. The same sequence is also
replayed on a fresh store after reopening to prove nothing depends on in-memory state."""
from __future__ import annotations

import pathlib
import random

import pytest

from curvine_py.core.errors import CurvineError
from curvine_py.master.namespace import Namespace
from curvine_py.master.types import ROOT_INO, BlockInfo, FileType, SetAttrChanges, WorkerInfo
from tests.unit.test_master_support import FakeClock, open_store

pytestmark = pytest.mark.usefixtures("meta_engine")   # every test on SQLite and on PostgreSQL

NAMES = ["a", "b", "c", "d"]
LIVE = [WorkerInfo("w1"), WorkerInfo("w2")]


def directories(ns: Namespace) -> list[int]:
    return [r[0] for r in ns._db.execute("SELECT ino FROM inodes WHERE type=2 ORDER BY ino")]


def files(ns: Namespace) -> list[int]:
    return [r[0] for r in ns._db.execute("SELECT ino FROM inodes WHERE type=1 AND nlink>0 ORDER BY ino")]


def step(ns: Namespace, rng: random.Random) -> None:
    dirs = directories(ns)
    parent, other = rng.choice(dirs), rng.choice(dirs)
    name, other_name = rng.choice(NAMES), rng.choice(NAMES)
    op = rng.randrange(9)
    if op == 0:
        ns.create(parent, name, FileType.REGULAR, 0o644, exclusive=rng.random() < 0.5, truncate=rng.random() < 0.5)
    elif op == 1:
        ns.create(parent, name, FileType.DIRECTORY, 0o755)
    elif op == 2:
        candidates = files(ns)
        if candidates:
            ns.link(rng.choice(candidates), parent, name)
    elif op == 3:
        ns.unlink(parent, name, keep_orphan=rng.random() < 0.2)
    elif op == 4:
        ns.unlink(parent, name, directory=True)
    elif op in (5, 6):
        ns.rename(parent, name, other, other_name, rng.choice([0, 0, 1, 2]))
    elif op == 7:
        candidates = files(ns)
        if candidates:
            ino = rng.choice(candidates)
            size = rng.randrange(0, 3 * (4 << 20))
            ns.setattr(ino, SetAttrChanges(size=size))
    else:
        candidates = files(ns)
        if candidates:
            ino = rng.choice(candidates)
            index = rng.randrange(3)
            grant = ns.add_block(ino, index, "", LIVE)
            length = rng.randrange(1, 4 << 20)
            ns.commit_file(ino, index * (4 << 20) + length, [BlockInfo(index, grant.block_id, length, 1,
                                                                         grant.worker_ids)])


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_keep_the_namespace_consistent(tmp_path: pathlib.Path, seed: int) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    ns = open_store(tmp_path, clock)
    outcomes = {"ok": 0, "error": 0}
    for i in range(400):
        try:
            step(ns, rng)
            outcomes["ok"] += 1
        except CurvineError:
            outcomes["error"] += 1
        assert not ns._db.in_transaction
        if i % 10 == 0:
            assert ns.check() == [], f"after step {i}"
    assert ns.check() == []
    assert outcomes["ok"] > 100 and outcomes["error"] > 10      # both paths were exercised
    listing = {(d, e.name, e.attr.ino) for d in directories(ns) for e in ns.readdir(d, limit=10_000)[0]}
    ns.close()
    again = open_store(tmp_path, clock)
    assert again.check() == []
    assert {(d, e.name, e.attr.ino) for d in directories(again)
            for e in again.readdir(d, limit=10_000)[0]} == listing
    # every freed block went to a pending deletion, every live block is still referenced
    referenced = {r[0] for r in again._db.execute("SELECT block_id FROM blocks")}
    queued = {r[0] for r in again._db.execute("SELECT block_id FROM deletions")}
    assert not referenced & queued
    assert ROOT_INO in directories(again)
    again.close()
