"""A directory's explicit replica count above the live workers (issue 29 item 9): its blocks are
under-replicated with that count as `wanted`, a repair round says it cannot repair them and why,
and rounds after it stay idle until the membership changes; the default durable count stays
bounded by the live workers. On SQLite and PostgreSQL."""
from __future__ import annotations

import pytest

from curvine_py.core.domain import Policy, StorageClass
from curvine_py.master.types import RoundResult
from tests.unit.test_master_replication import World, world

pytestmark = pytest.mark.usefixtures("meta_engine")
__all__ = ["world"]   # the fixture, used by name


def test_blocks_short_of_an_explicit_count_are_under_replicated(world: World) -> None:
    world.join("a", "b")
    world.store.call(world.ns.set_policy, "/", Policy(StorageClass.DURABLE, replicas=3))
    ino = world.file("f", 2)
    assert all(len(h) == 2 for h in world.holders(ino))
    state = world.repairer.scan()
    assert [(len(b.holders), b.wanted) for b in state.under] == [(2, 3), (2, 3)]
    assert state.lost == () and state.surplus == ()
    result = world.repairer.step()
    assert (result.copied, result.unplaceable) == (0, 2)
    assert all("cannot repair: only 2 live workers" in e for e in result.errors) and len(result.errors) == 2
    assert "only 2 live workers" in world.repairer.stats().last_error
    world.clock.advance(2.0)
    assert world.repairer.step() == RoundResult(), "nothing can change until a worker joins"
    world.join("c")
    world.clock.advance(2.0)
    assert world.repairer.step().copied == 2
    assert world.repairer.scan().under == ()


def test_the_default_durable_count_is_bounded_by_the_live_workers(world: World) -> None:
    world.join("a")
    world.file("f", 2)
    state = world.repairer.scan()
    assert state.under == () and state.lost == ()
