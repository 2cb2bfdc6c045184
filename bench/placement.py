"""`curvine-py bench placement`: weighted rendezvous (HRW) placement vs a 100-vnode consistent-hash ring.

For 10, 100 and 1,000 simulated workers, with equal and with mixed weights, over 1M keys:
- balance: max over nodes of (keys / weight), divided by its ideal (keys / total weight); 1.0 is
  perfect. With 1M keys and 1,000 nodes each node expects only ~1,000 keys, so even a perfect hash
  shows ~1.1 from sampling noise alone: the "random floor" column is that noise, measured in the
  same run (keys thrown at nodes by weighted multinomial draws), and HRW is judged against it.
- movement on +1 node (join) and -1 node (leave): fraction of keys whose owner changed, divided by
  the ideal share (the joining/leaving node's weight share); 1.0 is the minimum possible. "Collateral"
  is the fraction of keys that moved between nodes that did not change at all (ideal 0).
- the scalar lookup cost of `Rendezvous.owners(key)` in microseconds per key (the client's hot path)
  next to a ring lookup (hash + bisect) in the same run: HRW is O(nodes) per key, the ring O(log).

The HRW side is `core.hashing.bulk_owners` (numpy, agrees with `Rendezvous.owners`; checked on a
sample first); the ring is implemented here, weighted by giving each node 100 * weight / mean weight
virtual nodes (the unit is fixed at the starting cluster's mean weight, so joins and leaves do not
re-weight everyone else).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench import common
from curvine_py.core.hashing import Node, Rendezvous, bulk_owners, hash64

VNODES = 100
MIXED_WEIGHTS = (1.0, 2.0, 4.0)  # e.g. 1.92 / 3.84 / 7.68 TB NVMe drives side by side


@dataclass(frozen=True, slots=True)
class Cluster:
    ids: tuple[str, ...]
    weights: tuple[float, ...]

    @classmethod
    def make(cls, n: int, mixed: bool) -> Cluster:
        return cls(tuple(f"worker-{i:04d}" for i in range(n)), tuple(_weight(i, mixed) for i in range(n)))

    def joined(self, mixed: bool) -> Cluster:
        n = len(self.ids)
        return Cluster((*self.ids, f"worker-{n:04d}"), (*self.weights, _weight(n, mixed)))

    def without(self, index: int) -> Cluster:
        return Cluster(
            self.ids[:index] + self.ids[index + 1 :], self.weights[:index] + self.weights[index + 1 :]
        )


def _weight(index: int, mixed: bool) -> float:
    return MIXED_WEIGHTS[index % len(MIXED_WEIGHTS)] if mixed else 1.0


def key_hashes(count: int) -> np.ndarray:
    """Hashes of realistic LMCache-like keys, with the same hash the client uses."""
    return np.fromiter(
        (hash64(f"model@tp0@chunk-{i:09d}") for i in range(count)), dtype=np.uint64, count=count
    )


# -- the baseline: a weighted consistent-hash ring -------------------------------------------------
class Ring:
    """`unit` is the weight that gets `vnodes` points; it stays fixed across joins and leaves (a
    node's point count must not depend on who else is in the ring, or every change moves keys)."""

    def __init__(self, cluster: Cluster, unit: float, vnodes: int = VNODES) -> None:
        points: list[tuple[int, int]] = []
        for index, (node_id, weight) in enumerate(zip(cluster.ids, cluster.weights, strict=True)):
            for v in range(max(1, round(vnodes * weight / unit))):
                points.append((hash64(f"{node_id}#{v}"), index))
        points.sort()
        self.positions = np.array([p for p, _ in points], dtype=np.uint64)
        self.owner_of_point = np.array([i for _, i in points], dtype=np.int64)
        self._positions_list = [p for p, _ in points]
        self._ids = [cluster.ids[i] for _, i in points]

    def bulk_owners(self, keys: np.ndarray) -> np.ndarray:
        slot = np.searchsorted(self.positions, keys, side="left") % len(self.positions)
        return self.owner_of_point[slot]

    def owner(self, key: str) -> str:
        slot = bisect.bisect_left(self._positions_list, hash64(key))
        return self._ids[slot % len(self._ids)]


# -- metrics -------------------------------------------------------------------------------------
def balance(owner_index: np.ndarray, weights: Sequence[float]) -> float:
    counts = np.bincount(owner_index, minlength=len(weights)).astype(np.float64)
    w = np.asarray(weights, dtype=np.float64)
    return float((counts / w).max() * w.sum() / counts.sum())


def random_floor(keys: int, weights: Sequence[float], draws: int = 5, seed: int = 7) -> float:
    """Balance of an ideal random assignment with the same number of keys (the sampling noise)."""
    rng = np.random.default_rng(seed)
    w = np.asarray(weights, dtype=np.float64)
    values = []
    for _ in range(draws):
        counts = rng.multinomial(keys, w / w.sum()).astype(np.float64)
        values.append(float((counts / w).max() * w.sum() / keys))
    return common.median(values)


def movement(
    before: Cluster, before_owner: np.ndarray, after: Cluster, after_owner: np.ndarray, changed: str
) -> dict[str, float]:
    """Moved fraction, its ratio to the ideal share, and collateral moves between unchanged nodes."""
    before_ids = np.array(before.ids)[before_owner]
    after_ids = np.array(after.ids)[after_owner]
    moved = before_ids != after_ids
    involved = (before_ids == changed) | (after_ids == changed)
    all_weights = dict(zip(before.ids, before.weights, strict=True)) | dict(
        zip(after.ids, after.weights, strict=True)
    )
    total = max(sum(before.weights), sum(after.weights))
    ideal = all_weights[changed] / total
    fraction = float(moved.mean())
    return {
        "moved": fraction,
        "ideal": ideal,
        "moved_over_ideal": fraction / ideal,
        "collateral": float((moved & ~involved).mean()),
    }


def placement_stats(kind: str, cluster: Cluster, keys: np.ndarray, mixed: bool) -> dict[str, Any]:
    unit = sum(cluster.weights) / len(cluster.weights)  # ~VNODES points per node on average

    def owners(c: Cluster) -> np.ndarray:
        if kind == "hrw":
            return np.asarray(bulk_owners(c.ids, c.weights, keys))
        return Ring(c, unit).bulk_owners(keys)

    start = time.perf_counter()
    base = owners(cluster)
    joined = cluster.joined(mixed)
    leave_index = len(cluster.ids) // 2
    left = cluster.without(leave_index)
    result = {
        "balance": balance(base, cluster.weights),
        "join": movement(cluster, base, joined, owners(joined), joined.ids[-1]),
        "leave": movement(cluster, base, left, owners(left), cluster.ids[leave_index]),
    }
    result["seconds"] = time.perf_counter() - start
    return result


# -- scalar lookup cost --------------------------------------------------------------------------
def lookup_cost(cluster: Cluster, repeats: int, budget_lookups: int) -> common.Paired:
    """Microseconds per key of Rendezvous.owners(key) (subject) and the ring lookup (baseline).
    Returned as lookups per microsecond so that higher is better, like every Paired."""
    hrw = Rendezvous([Node(i, w) for i, w in zip(cluster.ids, cluster.weights, strict=True)])
    ring = Ring(cluster, sum(cluster.weights) / len(cluster.weights))
    count = max(50, budget_lookups // len(cluster.ids))
    sample = [f"model@tp0@chunk-{i:09d}" for i in range(count)]

    def run_hrw() -> float:
        seconds = common.timed(lambda: [hrw.owners(k) for k in sample])
        return count / (seconds * 1e6)

    def run_ring() -> float:
        seconds = common.timed(lambda: [ring.owner(k) for k in sample])
        return count / (seconds * 1e6)

    return common.paired(run_hrw, run_ring, repeats)


def check_agreement(cluster: Cluster, keys: int = 500) -> None:
    """bulk_owners must agree with the client's Rendezvous.owners, or the simulation means nothing."""
    hrw = Rendezvous([Node(i, w) for i, w in zip(cluster.ids, cluster.weights, strict=True)])
    names = [f"model@tp0@chunk-{i:09d}" for i in range(keys)]
    bulk = bulk_owners(cluster.ids, cluster.weights, np.array([hash64(k) for k in names], dtype=np.uint64))
    mismatches = sum(cluster.ids[int(b)] != hrw.owners(k)[0] for k, b in zip(names, bulk, strict=True))
    if mismatches:
        raise SystemExit(f"bulk_owners disagrees with Rendezvous.owners on {mismatches}/{keys} keys")


# -- report --------------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    p = common.parser("placement", __doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000_000, help="simulated keys (default 1M)")
    p.add_argument("--nodes", default="10,100,1000", help="cluster sizes (default 10,100,1000)")
    p.add_argument(
        "--lookups",
        type=int,
        default=200_000,
        help="node-evaluations per timed lookup batch (keys = this / nodes, >= 50)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.keys, args.nodes, args.lookups = min(args.keys, 100_000), "10,100", 50_000
        args.repeats = min(args.repeats, 3)
    sizes = [int(x) for x in args.nodes.split(",") if x]
    info = common.machine()
    print(f"placement: {args.keys:,} keys, nodes {sizes}, {args.repeats} timing repeats", flush=True)
    keys = key_hashes(args.keys)
    rows: list[dict[str, Any]] = []
    for n in sizes:
        for mixed in (False, True):
            cluster = Cluster.make(n, mixed)
            check_agreement(cluster)
            hrw = placement_stats("hrw", cluster, keys, mixed)
            ring = placement_stats("ring", cluster, keys, mixed)
            cost = lookup_cost(cluster, args.repeats, args.lookups)
            row = {
                "nodes": n,
                "weights": "mixed" if mixed else "equal",
                "hrw": hrw,
                "ring": ring,
                "random_floor_balance": random_floor(args.keys, cluster.weights),
                "lookup_us_per_key": {
                    "hrw": 1 / common.median(cost.subject),
                    "ring": 1 / common.median(cost.baseline),
                    "hrw_over_ring": 1 / cost.ratio,
                    "raw": cost.summary(),
                },
            }
            rows.append(row)
            print(
                f"  {n:>5} nodes {row['weights']:<5}: balance hrw {hrw['balance']:.3f} ring "
                f"{ring['balance']:.3f} floor {row['random_floor_balance']:.3f}; join hrw "
                f"{hrw['join']['moved_over_ideal']:.2f}x ring {ring['join']['moved_over_ideal']:.2f}x; "
                f"lookup hrw {row['lookup_us_per_key']['hrw']:.1f} us ring "
                f"{row['lookup_us_per_key']['ring']:.2f} us",
                flush=True,
            )
    payload = {
        "benchmark": "placement",
        "machine": info,
        "parameters": {
            "keys": args.keys,
            "nodes": sizes,
            "vnodes": VNODES,
            "mixed_weights_cycle": MIXED_WEIGHTS,
            "repeats": args.repeats,
            "quick": args.quick,
        },
        "results": rows,
    }
    common.publish("placement", args, payload, render(payload))
    return 0


def render(payload: dict[str, Any]) -> str:
    params = payload["parameters"]
    body = [
        f"## Placement: weighted rendezvous vs a {params['vnodes']}-vnode ring",
        "",
        common.machine_line(payload["machine"]),
        "",
        (
            f"{params['keys']:,} keys. Balance = max(keys/weight) / ideal (1.00 is perfect; the random floor "
            "is the sampling noise of a perfect hash with this many keys per node, measured in the same run). "
            "Movement = keys whose owner changed / the ideal share of the node that joined or left "
            "(1.00 is the minimum); collateral = keys moved between nodes that did not change (ideal 0). "
            f"Mixed weights cycle {', '.join(f'{w:g}' for w in params['mixed_weights_cycle'])}. "
            f"Lookup = one scalar `owners(key)` in microseconds (median of {params['repeats']})."
        ),
        "",
    ]
    rows = []
    for r in payload["results"]:
        hrw, ring, lk = r["hrw"], r["ring"], r["lookup_us_per_key"]
        rows.append(
            [
                r["nodes"],
                r["weights"],
                f"{hrw['balance']:.3f}",
                f"{ring['balance']:.3f}",
                f"{r['random_floor_balance']:.3f}",
                f"{hrw['join']['moved_over_ideal']:.2f}x / {ring['join']['moved_over_ideal']:.2f}x",
                f"{hrw['leave']['moved_over_ideal']:.2f}x / {ring['leave']['moved_over_ideal']:.2f}x",
                (
                    f"{hrw['join']['collateral'] + hrw['leave']['collateral']:.4f} / "
                    f"{ring['join']['collateral'] + ring['leave']['collateral']:.4f}"
                ),
                f"{lk['hrw']:.1f} / {lk['ring']:.2f}",
            ]
        )
    body.append(
        common.table(
            [
                "nodes",
                "weights",
                "balance HRW",
                "balance ring",
                "random floor",
                "join moved/ideal HRW / ring",
                "leave moved/ideal HRW / ring",
                "collateral HRW / ring",
                "lookup us HRW / ring",
            ],
            rows,
        )
    )
    return "\n".join(body)


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
