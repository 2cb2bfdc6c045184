"""Shared plumbing of the client tools: --master/--token/--config options (CURVINE_MASTER and
CURVINE_TOKEN or CURVINE_TOKEN_FILE stand in for them), one error boundary that prints a clear
message, sizes for people, and the progress bar of long transfers (on a terminal only)."""
from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Callable

from curvine_py.client import CurvineClient
from curvine_py.config import ClientConfig, add_token_file_option, load
from curvine_py.core.errors import CurvineError, errno_name
from curvine_py.rpc.tls import add_tls_options


def add_client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", help="HOST:PORT of the master, or a comma list of several masters "
                                         "(the leader is found and followed); env CURVINE_MASTER")
    parser.add_argument("--token", help="shared-secret token (env CURVINE_TOKEN; visible in ps: prefer --token-file)")
    add_token_file_option(parser)
    parser.add_argument("--config", help="TOML config file ([client] section)")
    parser.add_argument("--timeout", type=float, help="seconds per RPC (default 5)")
    add_tls_options(parser)


def client_from(args: argparse.Namespace, *, parallel: int = 0) -> CurvineClient:
    """`parallel`: requests the tool keeps in flight at once (a connection per worker for each)."""
    config = load(ClientConfig, section="client", toml_path=args.config,
                  flags={"master": args.master, "token": args.token, "token_file": args.token_file,
                         "rpc_timeout_s": args.timeout, "tls_cert": args.tls_cert, "tls_key": args.tls_key,
                         "tls_ca": args.tls_ca})
    if parallel > config.connections_per_worker:
        config = dataclasses.replace(config, connections_per_worker=parallel)
    return CurvineClient(config=config)


def run_tool(name: str, action: Callable[[], int]) -> int:
    """Runs a tool body; a CurvineError becomes `curvine-py NAME: <message> (ERRNO)` and exit 1."""
    logging.basicConfig(level=logging.WARNING, format=f"%(levelname)s {name}: %(message)s")
    try:
        return action()
    except CurvineError as exc:
        print(f"curvine-py {name}: {exc.message} ({errno_name(exc.errno)})", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB' (binary units, as df -h)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{n} B"
        size /= 1024
    return str(n)
