"""`curvine-py load LOCAL_PATH REMOTE_DIR`: pre-warms a local tree into the cluster (model weights
before vLLM starts), several files at once, resumable.

LOCAL_PATH's contents (or LOCAL_PATH itself, when it is a file) end up under REMOTE_DIR, which is
created with its parents when missing: `load /data/llama /models/llama` makes /models/llama/...
mirror /data/llama/..., and running it again is a no-op, never a nested copy.

Resumable: a file already in REMOTE_DIR with the same size and the same checksum is skipped and
reported unchanged. The checksum is the one the master keeps for every block (xxh3 of the block's
1 MiB chunk digests, set by the writer and verified on every read); the local file is hashed the
same way, so the check reads nothing from the workers. A file of the same size but other bytes is
uploaded again; --force uploads everything.

Each file goes through `fs put`'s commit path: written under a hidden temporary name, renamed into
place once every byte is stored, so a file that fails (a worker dies, the disk is full) is never
seen half-written and a rerun uploads it again. Symlinks (not followed), fifos, sockets and devices
are skipped with a note. A progress bar (bytes, files) on a terminal; in a pipe only the one-line
summary on stdout (or --json). Exit 1 when any file failed, each named on stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from curvine_py.cli.common import add_client_options, client_from, run_tool
from curvine_py.cli.transfer import (
    TreeProgress,
    default_jobs,
    local_plan,
    make_remote_dirs,
    report_problems,
    run_copies,
    uploader,
)
from curvine_py.client import CurvineClient
from curvine_py.core.errors import InvalidArgument, NotADirectory, NotFound
from curvine_py.core.keys import split_path


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py load", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_client_options(p)
    p.add_argument("local", metavar="LOCAL_PATH", help="a local directory (its contents are loaded) or file")
    p.add_argument("remote", metavar="REMOTE_DIR", help="the cluster directory to load into (created when missing)")
    p.add_argument("-j", "--jobs", type=int,
                   help="files uploaded at once (default: twice the cores, 2 to 8)")
    p.add_argument("--force", action="store_true", help="upload every file, even one already there unchanged")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    return p


def remote_target(path: str) -> str:
    """REMOTE_DIR normalized: a '..' in it is refused (the namespace would clamp it at the root,
    which is not what anyone typing it meant)."""
    if ".." in path.split("/"):
        raise InvalidArgument(f"REMOTE_DIR {path} contains '..': give the directory itself")
    return "/" + "/".join(split_path(path))


def make_remote_dir(client: CurvineClient, target: str) -> None:
    """REMOTE_DIR made with its parents when missing; a file there is refused."""
    try:
        if not client.fs.stat(target).is_dir:
            raise NotADirectory(f"REMOTE_DIR {target} is a file, not a directory (load copies into a directory)")
    except NotFound:
        client.fs.mkdir(target, parents=True)


def main(argv: list[str]) -> int:
    p = parser()
    args = p.parse_args(argv)
    jobs = default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        p.error("--jobs must be at least 1")

    def body() -> int:
        try:
            os.stat(args.local)
        except OSError as exc:
            print(f"curvine-py load: cannot read {args.local}: {exc.strerror}", file=sys.stderr)
            return 1
        with client_from(args, parallel=jobs) as client:
            target = remote_target(args.remote)
            plan = local_plan(os.path.abspath(args.local), target)   # local only: bad input changes nothing
            make_remote_dir(client, target)
            plan.directories_failed(make_remote_dirs(client, plan.dirs[1:]), target, "/")
            try:
                with TreeProgress("load", len(plan.files), plan.total_bytes).shown() as progress:
                    outcome = run_copies(plan, uploader(client, args.force), jobs, progress)
            except KeyboardInterrupt:
                print("curvine-py load: interrupted; the same command again uploads only what is not there yet",
                      file=sys.stderr)
                return 130
        report_problems("load", outcome)
        if args.json:
            print(json.dumps({"local": args.local, "remote": target, **outcome.as_dict()}))
        else:
            print(outcome.summary(f"load {args.local} -> {target}: uploaded"))
        return 1 if outcome.failed else 0

    return run_tool("load", body)
