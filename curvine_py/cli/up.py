"""`curvine-py up`: the embedded default. A master and one worker (and a FUSE mount with --mount)
under one data dir, on loopback by default; prints `master=HOST:PORT` when ready and writes it to
DIR/master.addr; Ctrl-C (or SIGTERM) stops everything cleanly, children first.

Secrets: the token (--token-file F, CURVINE_TOKEN_FILE or CURVINE_TOKEN) reaches the children in
their environment (CURVINE_TOKEN), never on their command lines, which `ps` shows to every user.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from curvine_py.config import (
    DEFAULT_MASTER_PORT,
    DEFAULT_WORKER_PORT,
    ClientConfig,
    add_token_file_option,
    load,
)
from curvine_py.core.errors import CurvineError
from curvine_py.procs import RoleProcess, curvine_command, start

log = logging.getLogger(__name__)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py up", description=__doc__)
    p.add_argument("--data-dir", required=True, help="everything lives under this directory")
    p.add_argument("--mount", help="also mount the namespace here (FUSE)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=DEFAULT_MASTER_PORT)
    p.add_argument("--worker-port", type=int, default=DEFAULT_WORKER_PORT)
    p.add_argument("--capacity", default="0", help="worker capacity, e.g. 20GB (0 = the disk's size)")
    p.add_argument("--token", help="shared secret (visible in ps: prefer --token-file or CURVINE_TOKEN)")
    add_token_file_option(p)
    p.add_argument("--verbose", action="store_true", help="echo the children's logs")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s up: %(message)s")
    data_dir = os.path.abspath(args.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    try:
        token = load(ClientConfig, section="client", flags={"token": args.token, "token_file": args.token_file}).token
    except CurvineError as exc:
        print(f"curvine-py up: {exc}", file=sys.stderr)
        return 2
    # The children read it from CURVINE_TOKEN; a token file of ours must not compete with it.
    secrets: dict[str, str | None] = {"CURVINE_TOKEN": token or None, "CURVINE_TOKEN_FILE": None}
    children: list[RoleProcess] = []
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        master = start("master", curvine_command(
            "master", "--data-dir", os.path.join(data_dir, "master"), "--host", args.host,
            "--port", str(args.master_port)), ready_prefix="master=", echo=args.verbose, env=secrets)
        children.append(master)
        worker_dir = os.path.join(data_dir, "worker")
        os.makedirs(worker_dir, exist_ok=True)
        capacity = f":{args.capacity}" if args.capacity != "0" else ""
        children.append(start("worker", curvine_command(
            "worker", "--master", master.address, "--data-dir", worker_dir + capacity, "--host", args.host,
            "--port", str(args.worker_port)), ready_prefix="worker=", echo=args.verbose, env=secrets))
        if args.mount:
            os.makedirs(args.mount, exist_ok=True)   # the one-command default creates its mountpoint
            children.append(start("mount", curvine_command(
                "mount", "--master", master.address, args.mount), ready_prefix="mounted=",
                echo=args.verbose, env=secrets))
        with open(os.path.join(data_dir, "master.addr"), "w") as fh:
            fh.write(master.address + "\n")
        print(f"master={master.address}", flush=True)
        if args.mount:
            print(f"mount={args.mount}", flush=True)
        while not stop.wait(0.5):
            dead = [c for c in children if not c.alive()]
            if dead:
                for child in dead:
                    log.error("%s exited with %s; stopping:\n%s", child.name, child.process.returncode,
                              "\n".join(child.tail))
                return 1
        return 0
    except CurvineError as exc:
        print(f"curvine-py up: {exc}", file=sys.stderr)
        return 1
    finally:
        for child in reversed(children):   # mount first, master last
            child.stop()
