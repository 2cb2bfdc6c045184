"""`fs put -r` and `fs get -r`: a directory and everything below it, as `cp -r` and
`hdfs dfs -put`/`-get` do it: a destination that is a directory receives a copy named after the
source (`put -r ./llama /models` makes /models/llama), a destination that does not exist becomes
the copy (its parent must exist; `put -p` creates it). Every file is copied (no skipping: that is
`curvine-py load`), several at once (`-j`), each through put's or get's temporary-name commit, with
the tree's progress bar on a terminal and a one-line summary on stdout. Exit 1 if any file failed,
each named on stderr. Symlinks and special files are skipped with a note (transfer.py says why).
"""
from __future__ import annotations

import argparse
import os
import posixpath
import sys

from curvine_py.cli.transfer import (
    Outcome,
    TreeProgress,
    default_jobs,
    downloader,
    local_plan,
    make_local_dirs,
    make_remote_dirs,
    remote_plan,
    report_problems,
    run_copies,
    uploader,
)
from curvine_py.client import CurvineClient
from curvine_py.client.fs import normalize
from curvine_py.core.errors import NotFound


def _jobs(args: argparse.Namespace) -> int | None:
    jobs: int = default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        print("curvine-py fs: --jobs must be at least 1", file=sys.stderr)
        return None
    return jobs


def _finish(verb: str, source: str, target: str, outcome: Outcome) -> int:
    report_problems("fs", outcome)
    print(outcome.summary(f"{verb} {source} -> {target}: copied", unchanged=False))
    return 1 if outcome.failed else 0


def put_tree(client: CurvineClient, args: argparse.Namespace) -> int:
    jobs = _jobs(args)
    if jobs is None:
        return 1
    source = os.path.abspath(args.local)
    dest = normalize(args.path)
    try:
        status = client.fs.stat(dest)
    except NotFound:
        parent = posixpath.dirname(dest)
        if not args.parents and not client.fs.exists(parent):
            print(f"curvine-py fs: put: directory {parent} does not exist (ENOENT); use put -p to create it",
                  file=sys.stderr)
            return 1
        target = dest
    else:
        if not status.is_dir:
            print(f"curvine-py fs: put: {dest} is a file (put -r copies a directory into a directory)",
                  file=sys.stderr)
            return 1
        target = posixpath.join(dest, os.path.basename(source))
    plan = local_plan(source, target)
    plan.directories_failed(make_remote_dirs(client, plan.dirs), target, "/")
    with TreeProgress("put", len(plan.files), plan.total_bytes).shown() as progress:
        outcome = run_copies(plan, uploader(client, force=True), jobs, progress)
    return _finish("put", args.local, target, outcome)


def get_tree(client: CurvineClient, args: argparse.Namespace) -> int:
    jobs = _jobs(args)
    if jobs is None:
        return 1
    source = normalize(args.path)
    dest = os.path.abspath(args.local)
    if os.path.isdir(dest):
        name = posixpath.basename(source)
        target = os.path.join(dest, name) if name else dest   # the root's contents go into dest itself
    elif os.path.lexists(dest):
        print(f"curvine-py fs: get: {args.local} is not a directory (get -r copies a directory into a directory)",
              file=sys.stderr)
        return 1
    elif not os.path.isdir(os.path.dirname(dest)):
        print(f"curvine-py fs: get: local directory {os.path.dirname(dest)} does not exist (ENOENT)", file=sys.stderr)
        return 1
    else:
        target = dest
    plan = remote_plan(client, source, target)
    plan.directories_failed(make_local_dirs(plan.dirs), target, os.sep)
    with TreeProgress("get", len(plan.files), plan.total_bytes).shown() as progress:
        outcome = run_copies(plan, downloader(client), jobs, progress)
    return _finish("get", args.path, target, outcome)
