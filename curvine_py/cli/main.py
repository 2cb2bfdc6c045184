"""`curvine-py <subcommand> ...`: dispatch with lazy imports, so `curvine-py csi` never imports
pyfuse3 and `curvine-py kv` never imports the master.

Every subcommand module exposes `main(argv: list[str]) -> int`.
"""
from __future__ import annotations

import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "master": ("curvine_py.master.main", "run the metadata service (gRPC)"),
    "worker": ("curvine_py.worker.main", "run a storage worker on this node"),
    "up": ("curvine_py.cli.up", "embedded default: master + worker with lm:// + mount, and the LMCache settings, in one command"),
    "fs": ("curvine_py.cli.fs", "namespace tools: ls mkdir put get (-r) cat rm mv stat du df"),
    "load": ("curvine_py.cli.load", "pre-warm a local tree into the cluster: parallel, resumable (same size and checksum: skipped)"),
    "kv": ("curvine_py.cli.kv", "KV objects: put get exists rm"),
    "report": ("curvine_py.cli.report", "cluster workers, capacity, usage, health"),
    "fsck": ("curvine_py.cli.fsck", "check metadata against worker inventories; --repair fixes what it can"),
    "mount": ("curvine_py.fuse.main", "FUSE mount of the namespace"),
    "csi": ("curvine_py.csi.main", "Kubernetes CSI driver (identity, controller, node) on a unix socket"),
    "meta": ("curvine_py.cli.meta", "metadata engine tools: dump and load a namespace"),
    "router": ("curvine_py.router.main", "OpenAI-compatible proxy in front of vLLM replicas: round-robin, prefix or KV-aware routing"),
    "bench": ("curvine_py.bench.main", "benchmarks: kv placement meta fuse lmcache"),
}


def usage() -> str:
    lines = ["usage: curvine-py <subcommand> [options]", "", "subcommands:"]
    lines += [f"  {name:<8} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"curvine-py: unknown subcommand {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    result: int = module.main(rest)
    return result


if __name__ == "__main__":
    sys.exit(main())
