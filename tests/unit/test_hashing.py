"""Weighted rendezvous placement: agreement, balance and minimal movement (issue #2 targets:
max/avg <= 1.05 over 100 weighted nodes; keys moved on join/leave within 1.1x the ideal share)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curvine_py.core.hashing import Node, Rendezvous, bulk_owners, hash64

KEYS = 600_000
RNG_KEYS = np.random.default_rng(7).integers(0, 2**63, size=KEYS, dtype=np.int64).astype(np.uint64)
# Balance is statistical: with weights 1..4 the lightest node expects ~8k of 2M keys (std ~1.1%),
# so max/avg <= 1.05 measures the hashing, not the sample size.
BALANCE_KEYS = np.random.default_rng(11).integers(0, 2**63, size=2_000_000, dtype=np.int64).astype(np.uint64)

weights_100 = st.lists(st.integers(min_value=1, max_value=4), min_size=100, max_size=100)


def test_owner_is_first_of_rank_and_replicas_are_distinct() -> None:
    ring = Rendezvous([Node(f"w{i}", 1 + i % 3) for i in range(12)])
    for i in range(500):
        key = f"chunk-{i}"
        rank = ring.rank(key)
        assert sorted(rank) == sorted(f"w{i}" for i in range(12))
        assert ring.owners(key, 1) == rank[:1]
        assert ring.owners(key, 3) == rank[:3]


def test_bulk_and_scalar_placement_agree() -> None:
    ids = [f"worker-{i}" for i in range(40)]
    weights = [1.0 + (i % 5) for i in range(40)]
    ring = Rendezvous([Node(n, w) for n, w in zip(ids, weights, strict=True)])
    keys = [f"vllm@model@1@0@{i:x}@bfloat16" for i in range(3000)]
    owners = bulk_owners(ids, weights, np.array([hash64(k) for k in keys], dtype=np.uint64))
    assert [ids[i] for i in owners] == [ring.owners(k)[0] for k in keys]


@settings(max_examples=2, deadline=None)
@given(weights_100)
def test_balance_over_100_weighted_nodes(weights: list[int]) -> None:
    ids = [f"n{i}" for i in range(100)]
    counts = np.bincount(bulk_owners(ids, weights, BALANCE_KEYS), minlength=100)
    expected = np.array(weights) / sum(weights) * len(BALANCE_KEYS)
    assert (counts / expected).max() <= 1.05


@settings(max_examples=3, deadline=None)
@given(weights_100, st.integers(min_value=1, max_value=4))
def test_join_and_leave_move_about_the_ideal_share(weights: list[int], new_weight: int) -> None:
    ids = [f"n{i}" for i in range(100)]
    before = bulk_owners(ids, weights, RNG_KEYS)
    joined = bulk_owners([*ids, "new"], [*weights, new_weight], RNG_KEYS)
    moved = np.mean(joined != before)
    ideal = new_weight / (sum(weights) + new_weight)
    assert moved <= 1.1 * ideal
    assert np.all((joined == before) | (joined == 100)), "a join only moves keys to the new node"

    leaving = 17
    rest = [i for i in range(100) if i != leaving]
    after = np.array(rest)[bulk_owners([ids[i] for i in rest], [weights[i] for i in rest], RNG_KEYS)]
    moved = np.mean(after != before)
    assert moved <= 1.1 * weights[leaving] / sum(weights)
    assert np.all((after == before) | (before == leaving)), "a leave only moves the leaver's keys"


@pytest.mark.parametrize("bad", [[Node("a"), Node("a")], [Node("a", 0)], [Node("a", float("nan"))]])
def test_invalid_node_sets_are_refused(bad: list[Node]) -> None:
    with pytest.raises(ValueError):
        Rendezvous(bad)


def test_empty_view_has_no_owner() -> None:
    assert Rendezvous([]).owners("k") == []
