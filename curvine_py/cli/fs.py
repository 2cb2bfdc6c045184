"""`curvine-py fs`: ls mkdir put get cat rm mv stat du df policy quota (as Curvine's `cv fs`)."""
from __future__ import annotations

import argparse
import json
import os
import posixpath
import re
import sys
import time
from dataclasses import replace

from curvine_py.cli import fstree as tree
from curvine_py.cli.common import add_client_options, client_from, human_bytes, run_tool
from curvine_py.cli.progress import progress_bar
from curvine_py.cli.transfer import default_jobs
from curvine_py.client import CurvineClient, FileStatus
from curvine_py.config import parse_size
from curvine_py.core.domain import StorageClass
from curvine_py.core.errors import InvalidArgument, NotFound


def _line(status: FileStatus) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(status.mtime_ns / 1e9))
    import stat as st
    return f"{st.filemode(status.mode)} {status.nlink:>3} {status.uid:>5} {status.gid:>5} {status.size:>14} {stamp} {status.path}"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py fs", description=__doc__)
    add_client_options(p)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("ls").add_argument("path", nargs="?", default="/")
    mk = sub.add_parser("mkdir")
    mk.add_argument("path")
    mk.add_argument("-p", "--parents", action="store_true")
    put = sub.add_parser("put", help="upload a local file (-r: a directory)")
    put.add_argument("local")
    put.add_argument("path")
    put.add_argument("-p", "--parents", action="store_true", help="create the missing parent directories")
    get = sub.add_parser("get", help="download to a local file (-r: a directory)")
    get.add_argument("path")
    get.add_argument("local")
    for command in (put, get):
        command.add_argument("-r", "--recursive", action="store_true",
                             help="copy a directory and everything below it (as cp -r)")
        command.add_argument("-j", "--jobs", type=int, help="with -r: files copied at once (default: twice the cores, 2 to 8)")
    sub.add_parser("cat").add_argument("path")
    rm = sub.add_parser("rm")
    rm.add_argument("path")
    rm.add_argument("-r", "--recursive", action="store_true")
    mv = sub.add_parser("mv")
    mv.add_argument("src")
    mv.add_argument("dst")
    stat = sub.add_parser("stat")
    stat.add_argument("path")
    stat.add_argument("--json", action="store_true")
    sub.add_parser("du").add_argument("path", nargs="?", default="/")
    sub.add_parser("df").add_argument("path", nargs="?", default="/",
                                      help="as seen from this directory (bounded by its quota)")
    policy = sub.add_parser("policy", help="show or set a directory's policy (inherited by its subtree)")
    policy.add_argument("path")
    policy.add_argument("--class", dest="storage_class", choices=["cache", "durable"])
    policy.add_argument("--replicas", type=int)
    policy.add_argument("--ttl-ms", type=int)
    policy.add_argument("--block-size", type=parse_size)
    policy.add_argument("--placement", choices=["hash", "local"])
    quota = sub.add_parser("quota", help="show or set a directory's quota (bytes and inodes of its subtree)")
    quota.add_argument("path")
    quota.add_argument("--bytes", dest="max_bytes", type=parse_size, help="byte limit, 0 = unlimited")
    quota.add_argument("--inodes", dest="max_inodes", type=int, help="inode (name) limit, 0 = unlimited")
    return p


def _limit(used: int, limit: int, human: bool) -> str:
    shown = human_bytes(used) if human else str(used)
    return f"{shown}/{(human_bytes(limit) if human else str(limit)) if limit else 'unlimited'}"


def _quota(client: CurvineClient, args: argparse.Namespace) -> None:
    """No option: print the quota. Options: change those limits, keeping the other one."""
    if args.max_bytes is not None or args.max_inodes is not None:
        if (args.max_inodes or 0) < 0:
            raise InvalidArgument("--inodes must be >= 0")
        current = client.fs.quota(args.path)
        client.fs.set_quota(args.path,
                            max_bytes=current.max_bytes if args.max_bytes is None else args.max_bytes,
                            max_inodes=current.max_inodes if args.max_inodes is None else args.max_inodes)
    q = client.fs.quota(args.path)
    print(f"{args.path}: bytes {_limit(q.used_bytes, q.max_bytes, True)}  "
          f"inodes {_limit(q.used_inodes, q.max_inodes, False)}")


_CLASSES = {"cache": StorageClass.CACHE, "durable": StorageClass.DURABLE}


def _policy(client: CurvineClient, args: argparse.Namespace) -> None:
    """No option: print the effective policy. Options: change those fields of the directory's own
    policy (starting from what it inherits), leaving the others as they are."""
    current = client.fs.get_policy(args.path)
    changes = {"storage_class": _CLASSES.get(args.storage_class or ""), "replicas": args.replicas,
               "ttl_ms": args.ttl_ms, "block_size": args.block_size, "placement": args.placement}
    changes = {k: v for k, v in changes.items() if v is not None}
    if changes:
        current = client.fs.set_policy(args.path, replace(current.policy, **changes))
    p = current.policy
    name = {v: k for k, v in _CLASSES.items()}.get(p.storage_class, "inherit")
    print(f"{args.path}: class={name} replicas={p.replicas or 'default'} ttl_ms={p.ttl_ms} "
          f"block_size={p.block_size or 'default'} placement={p.placement or 'hash'} (defined at {current.path})")


def _put(client: CurvineClient, args: argparse.Namespace) -> int:
    """As `cp` and `hdfs dfs -put`: a missing parent directory is an error that says so (and how
    to have it made), unless -p makes it; an unreadable local file is an error before any RPC."""
    try:
        size = os.stat(args.local).st_size
    except OSError as exc:
        print(f"curvine-py fs: put: cannot read {args.local}: {exc.strerror}", file=sys.stderr)
        return 1
    if os.path.isdir(args.local):
        if args.recursive:
            return tree.put_tree(client, args)
        print(f"curvine-py fs: put: {args.local} is a directory (put copies one file; put -r copies a directory)",
              file=sys.stderr)
        return 1
    parent = posixpath.dirname(posixpath.normpath("/" + args.path.lstrip("/")))
    if args.parents:
        client.fs.mkdir(parent, parents=True)
    elif not client.fs.exists(parent):
        print(f"curvine-py fs: put: directory {parent} does not exist (ENOENT); "
              f"use put -p to create it", file=sys.stderr)
        return 1
    with progress_bar(f"put {os.path.basename(args.local)}", size) as bar:
        status = client.fs.put(args.local, args.path, progress=bar.advance)
    print(f"{status.size} bytes -> {args.path}")
    return 0


def execute(client: CurvineClient, args: argparse.Namespace) -> int:
    fs = client.fs
    match args.command:
        case "ls":
            for entry in fs.ls(args.path):
                print(_line(entry))
        case "mkdir":
            fs.mkdir(args.path, parents=args.parents)
        case "put":
            return _put(client, args)
        case "get" if args.recursive and fs.stat(args.path).is_dir:
            return tree.get_tree(client, args)
        case "get" if fs.stat(args.path).is_dir:
            print(f"curvine-py fs: get: {args.path} is a directory (get copies one file; get -r copies a directory)",
                  file=sys.stderr)
            return 1
        case "get":
            with progress_bar(f"get {args.path}", fs.stat(args.path).size) as bar:
                moved = fs.get(args.path, args.local, progress=bar.advance)
            print(f"{moved} bytes -> {args.local}")
        case "cat":
            with fs.open(args.path) as handle:
                out = sys.stdout.buffer
                while chunk := handle.read(1 << 20):
                    out.write(chunk)
                out.flush()
        case "rm":
            fs.rm(args.path, recursive=args.recursive)
        case "mv":
            fs.rename(args.src, args.dst)
        case "stat":
            status = fs.stat(args.path, follow_symlinks=False)
            if args.json:
                print(json.dumps({k: getattr(status, k) for k in status.__slots__}))
            else:
                print(_line(status))
        case "du":
            line = f"{fs.du(args.path)}\t{args.path}"
            if fs.stat(args.path).is_dir:
                q = fs.quota(args.path)
                line += f"\t{q.used_inodes} inodes"
                if q.max_bytes or q.max_inodes:
                    line += (f"\tquota bytes {_limit(q.used_bytes, q.max_bytes, True)} "
                             f"inodes {_limit(q.used_inodes, q.max_inodes, False)}")
            print(line)
        case "policy":
            _policy(client, args)
        case "quota":
            _quota(client, args)
        case "df":
            info = fs.df(args.path)
            files = f"{info.files}/{info.max_files}" if info.max_files else str(info.files)
            print(f"capacity {human_bytes(info.capacity)}  used {human_bytes(info.used)}  "
                  f"available {human_bytes(info.available)}  files {files}")
    return 0


# The master names a missing entry by its parent's inode ("'pipe.bin' not found in 6"), a path
# lookup by the prefix it resolved ("/a/b: 'a' not found"): a person gave a path, so the message
# names that path, up to the component that is missing.
_MISSING = re.compile(r"^(?:/\S*: )?'(?P<name>[^/]+)' not found(?: in \d+)?")


def missing_path(message: str, paths: list[str]) -> str | None:
    """The prefix of one of `paths` that ends at the missing component the master's `message`
    names; None when the message is not of that kind or no path has the component."""
    match = _MISSING.match(message)
    if match is None:
        return None
    for path in paths:
        parts = posixpath.normpath("/" + path.lstrip("/")).split("/")[1:]
        for index, part in enumerate(parts):
            if part == match["name"]:
                return "/" + "/".join(parts[:index + 1])
    return None


def _paths(args: argparse.Namespace) -> list[str]:
    return [p for p in (getattr(args, "path", None), getattr(args, "src", None), getattr(args, "dst", None))
            if isinstance(p, str)]


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)

    def body() -> int:
        # A tree copy keeps --jobs requests in flight: a connection per worker for each.
        jobs = (args.jobs or default_jobs()) if args.command in ("put", "get") and args.recursive else 0
        with client_from(args, parallel=jobs) as client:
            try:
                return execute(client, args)
            except NotFound as exc:
                path = missing_path(exc.message, _paths(args))
                if path is None:
                    raise
                hint = f"; create it first: fs mkdir -p {path}" if args.command in ("policy", "quota") else ""
                raise NotFound(f"{args.command}: {path}: no such file or directory{hint}") from None

    return run_tool("fs", body)
