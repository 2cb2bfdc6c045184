"""The client's membership view built from the master's (client/membership.py build_view):
placement over the live workers only, addresses for every registered one."""
from __future__ import annotations

import pytest

from curvine_py.client.membership import GiB, MembershipCache, WorkerAddress, build_view
from curvine_py.core.cluster import MembershipView, WorkerInfo
from curvine_py.core.errors import Unavailable


def info(worker_id: str, *, live: bool, port: int = 9000, capacity: int = 0) -> WorkerInfo:
    return WorkerInfo(worker_id=worker_id, host="10.0.0.1", port=port, node=f"n-{worker_id}",
                      unix_socket=f"/run/{worker_id}.sock", capacity=capacity, live=live)


def test_live_workers_are_placed_and_every_registered_one_is_reachable() -> None:
    view = build_view(MembershipView(7, (info("a", live=True, port=1), info("late", live=False, port=2),
                                         info("b", live=True, port=3)), "cluster"))
    assert view.epoch == 7
    assert sorted(view.workers) == ["a", "b"]                  # what KV keys are placed on
    assert sorted(view.reachable) == ["a", "b", "late"]
    assert view.reachable["late"] == WorkerAddress("late", "10.0.0.1", 2, "n-late", "/run/late.sock", 0)
    assert view.workers["a"] is view.reachable["a"]
    for key in (f"key-{i}" for i in range(200)):               # a late worker never owns a key
        assert "late" not in view.placement.rank(key)
    assert view.address("late") == view.reachable["late"] and view.address("a") == view.workers["a"]
    assert view.address("stranger") is None


def test_a_view_of_live_workers_only_gives_the_same_maps() -> None:
    # what a master that lists only its live workers sends
    view = build_view(MembershipView(1, (info("a", live=True, capacity=4 * GiB),), "cluster"))
    assert view.workers == view.reachable and list(view.workers) == ["a"]
    assert view.placement.owners("k", 1) == ["a"]


def test_no_live_worker_places_nothing_but_keeps_addresses() -> None:
    view = build_view(MembershipView(3, (info("a", live=False),), "cluster"))
    assert view.workers == {} and list(view.reachable) == ["a"]
    assert view.placement.rank("k") == []


def test_the_cache_serves_the_last_view_while_the_master_is_down() -> None:
    now = [0.0]
    replies: list[MembershipView | Unavailable] = [Unavailable("down")]

    def fetch() -> MembershipView:
        reply = replies.pop(0)
        if isinstance(reply, Unavailable):
            raise reply
        return reply

    cache = MembershipCache(fetch, refresh_s=2.0, clock=lambda: now[0])
    with pytest.raises(Unavailable, match="cannot fetch membership"):
        cache.view()                                           # nothing to serve yet: a clear error
    replies.append(MembershipView(5, (info("a", live=True), info("b", live=False)), "cluster"))
    first = cache.view()
    assert (first.epoch, sorted(first.reachable)) == (5, ["a", "b"])
    assert cache.peek() is first
    now[0] = 2.5
    assert cache.peek() is None                                # due for a refresh
    replies.append(Unavailable("down again"))
    assert cache.view() is first                               # kept, with its late worker's address
