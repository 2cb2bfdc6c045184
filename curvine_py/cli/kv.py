"""`curvine-py kv`: put KEY FILE, get KEY FILE, exists KEY, rm KEY. A miss exits 1 and says so."""
from __future__ import annotations

import argparse
import sys

from curvine_py.cli.common import add_client_options, client_from, run_tool


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py kv", description=__doc__)
    add_client_options(p)
    sub = p.add_subparsers(dest="command", required=True)
    put = sub.add_parser("put", help="store FILE's bytes under KEY ('-' reads stdin)")
    put.add_argument("key")
    put.add_argument("file")
    put.add_argument("--ttl-ms", type=int, default=0)
    put.add_argument("--durable", action="store_true", help="never evicted (default: cache class)")
    get = sub.add_parser("get", help="write KEY's bytes to FILE ('-' writes stdout)")
    get.add_argument("key")
    get.add_argument("file")
    sub.add_parser("exists").add_argument("key")
    sub.add_parser("rm").add_argument("key")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)

    def body() -> int:
        with client_from(args) as client:
            kv = client.kv
            if args.command == "put":
                if args.file == "-":
                    data = sys.stdin.buffer.read()
                else:
                    with open(args.file, "rb") as source:
                        data = source.read()
                kv.put(args.key, data, ttl_ms=args.ttl_ms, durable=args.durable)
                print(f"stored {len(data)} bytes under {args.key!r}")
                return 0
            if args.command == "get":
                value = kv.get_view(args.key)
                if value is None:
                    print(f"miss: no object under {args.key!r}", file=sys.stderr)
                    return 1
                if args.file == "-":
                    sys.stdout.buffer.write(value)
                else:
                    with open(args.file, "wb") as out:
                        out.write(value)
                    print(f"{len(value)} bytes -> {args.file}")
                return 0
            if args.command == "exists":
                found = kv.exists(args.key)
                print("yes" if found else f"miss: no object under {args.key!r}",
                      file=sys.stdout if found else sys.stderr)
                return 0 if found else 1
            found = kv.delete(args.key)
            if not found:
                print(f"miss: no object under {args.key!r}", file=sys.stderr)
                return 1
            print(f"removed {args.key!r}")
            return 0

    return run_tool("kv", body)
