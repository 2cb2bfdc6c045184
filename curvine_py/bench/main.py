"""`curvine-py bench <name>`: runs bench/<name>.py from the source checkout.

Benchmarks start real clusters (tests/harness.py) and measure their baselines in the same run, so
they live beside the tests in the repository, not in the installed package.
"""
from __future__ import annotations

import importlib
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
BENCHMARKS = {
    "kv": "KV put/get vs a raw socket pair (sendfile -> recv_into), incl. short-circuit",
    "placement": "rendezvous balance and movement for 10/100/1000 workers",
    "meta": "master metadata ops/s at 10k and 1M files",
    "fuse": "mount vs client library: sequential, random 4 KiB, create/stat/unlink, fio",
    "lmcache": "LMCache connectors: native plugin, lm://, fs://, stock lm server, Redis",
    "failover": "standby master takeover (PostgreSQL) vs restarting the one master by hand",
    "soak": "64 clients of mixed KV and file ops for 10 min: errors, mismatches, daemon RSS, latency",
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHMARKS:
        print("usage: curvine-py bench <name> [options]\n\nbenchmarks:")
        for name, what in BENCHMARKS.items():
            print(f"  {name:<10} {what}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    if not (REPO / "bench" / f"{argv[0]}.py").exists():
        print(f"curvine-py bench: bench/{argv[0]}.py not found (run from a source checkout)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    module = importlib.import_module(f"bench.{argv[0]}")
    result: int = module.main(argv[1:])
    return result
