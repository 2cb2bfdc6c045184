"""`curvine-py mount` flags -> MountOptions, and MountOptions -> the option set handed to libfuse.

Defaults follow what LMCache's fs:// connector and a POSIX user need: the kernel checks
permissions (default_permissions), attributes and names are cached 1 s, negative lookups are NOT
cached (LMCache polls with stat for a name another node may create at any moment), the page cache
is dropped at open (keep_cache off: close-to-open with other nodes), 1 MiB requests and a raised
read-ahead. `-o attr_timeout=S,entry_timeout=S,negative_timeout=S,writeback_cache,...` are accepted
too, so `mount -t fuse`-style option strings (CSI) work unchanged.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from curvine_py.core.errors import InvalidArgument

DEFAULT_DEADLINE_S = 10.0
DEFAULT_READ_AHEAD_KB = 16384    # 1 MiB requests need >= 1024; 16 MiB keeps many in flight (measured best)
MAX_IO = 1 << 20                 # the kernel's largest FUSE request (max_pages 256)

# Options libfuse understands (mount.c / fuse_lowlevel.c), passed through as given.
_LIBFUSE_FLAGS = {
    "allow_other", "allow_root", "auto_unmount", "blkdev", "default_permissions", "ro", "rw", "suid",
    "nosuid", "dev", "nodev", "exec", "noexec", "async", "sync", "atime", "noatime", "diratime",
    "nodiratime", "lazytime", "nolazytime", "relatime", "norelatime", "strictatime", "nostrictatime",
    "dirsync",
}
_LIBFUSE_VALUED = {"fsname", "subtype", "max_read", "blksize", "context", "fscontext", "defcontext",
                   "rootcontext"}


@dataclass(frozen=True, slots=True)
class MountOptions:
    master: str
    mountpoint: str
    subdir: str = "/"
    token: str = ""
    node: str = ""
    fuse_options: frozenset[str] = frozenset({"default_permissions"})
    attr_timeout: float = 1.0
    entry_timeout: float = 1.0
    negative_timeout: float = 0.0
    writeback_cache: bool = False
    direct_io: bool = False
    keep_cache: bool = False
    deadline_s: float = DEFAULT_DEADLINE_S
    force: bool = False
    read_ahead_kb: int = DEFAULT_READ_AHEAD_KB
    max_tasks: int = 64
    max_background: int = 64
    config: str | None = None
    log_level: str = "INFO"
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def read_only(self) -> bool:
        return "ro" in self.fuse_options

    def libfuse_options(self) -> set[str]:
        options = set(self.fuse_options)
        options.discard("rw")
        if not any(o.startswith("fsname=") for o in options):
            options.add(f"fsname=curvine:{self.subdir}")
        if not any(o.startswith("subtype=") for o in options):
            options.add("subtype=curvine")
        return options


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py mount", description="Mount the curvine namespace with FUSE.")
    p.add_argument("mountpoint")
    p.add_argument("--master", default=os.environ.get("CURVINE_MASTER", ""),
                   help="HOST:PORT of the master (env CURVINE_MASTER)")
    p.add_argument("--subdir", default="/", help="mount this directory of the namespace (default /)")
    p.add_argument("--token", default=os.environ.get("CURVINE_TOKEN", ""), help="shared secret (env CURVINE_TOKEN)")
    p.add_argument("--node", default="", help="node name for placement/short-circuit (default: hostname)")
    p.add_argument("-o", dest="options", action="append", default=[],
                   help="comma-separated mount options: allow_other, default_permissions, ro, fsname=..., "
                        "attr_timeout=S, entry_timeout=S, negative_timeout=S, writeback_cache, direct_io, "
                        "keep_cache")
    p.add_argument("--attr-timeout", type=float, help="seconds the kernel caches attributes (default 1)")
    p.add_argument("--entry-timeout", type=float, help="seconds the kernel caches names (default 1)")
    p.add_argument("--negative-timeout", type=float,
                   help="seconds a missing name is cached (default 0: never, as LMCache needs)")
    p.add_argument("--writeback-cache", action="store_true", default=None,
                   help="kernel write-back cache (faster small writes, slower large ones)")
    p.add_argument("--direct-io", action="store_true", default=None, help="bypass the page cache")
    p.add_argument("--keep-cache", action="store_true", default=None,
                   help="keep the page cache across opens (other nodes' writes may be missed)")
    p.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE_S,
                   help=f"seconds any operation may take before it fails (default {DEFAULT_DEADLINE_S:g})")
    p.add_argument("--read-ahead-kb", type=int, default=DEFAULT_READ_AHEAD_KB,
                   help=f"kernel read-ahead of the mount (default {DEFAULT_READ_AHEAD_KB})")
    p.add_argument("--max-tasks", type=int, default=64, help="concurrent FUSE requests served (default 64)")
    p.add_argument("--force", action="store_true",
                   help="recover a stale mountpoint (or replace a live mount): lazy unmount, then mount")
    p.add_argument("--config", help="TOML config file ([client] section)")
    p.add_argument("--log-level", default=os.environ.get("CURVINE_LOG_LEVEL", "INFO"))
    return p


def _seconds(name: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise InvalidArgument(f"{name}={value!r} is not a number of seconds") from None
    if seconds < 0:
        raise InvalidArgument(f"{name} must be >= 0")
    return seconds


def parse(argv: list[str]) -> MountOptions:
    args = parser().parse_args(argv)
    if not args.master:
        raise InvalidArgument("--master HOST:PORT is required (or CURVINE_MASTER)")
    timeouts: dict[str, float] = {}
    flags: dict[str, bool] = {}
    # Root mounts serve every user by default (a shared cluster, CSI volumes); the kernel still
    # checks permissions (default_permissions). `-o noallow_other` keeps it to the mounting user.
    fuse_options = {"default_permissions"} | ({"allow_other"} if os.geteuid() == 0 else set())
    extra: dict[str, str] = {}
    for group in args.options:
        for item in (o.strip() for o in group.split(",")):
            if not item:
                continue
            key, eq, value = item.partition("=")
            if key in ("attr_timeout", "entry_timeout", "negative_timeout"):
                timeouts[key] = _seconds(key, value)
            elif key == "noallow_other" and not eq:
                fuse_options.discard("allow_other")
            elif key in ("writeback_cache", "direct_io", "keep_cache") and not eq:
                flags[key] = True
            elif (key in _LIBFUSE_FLAGS and not eq) or (key in _LIBFUSE_VALUED and eq):
                if key == "rw":
                    fuse_options.discard("ro")
                elif key == "ro":
                    fuse_options.discard("rw")
                fuse_options.add(item)
            else:
                raise InvalidArgument(f"unknown mount option {item!r}")
    for key, value in (("attr_timeout", args.attr_timeout), ("entry_timeout", args.entry_timeout),
                       ("negative_timeout", args.negative_timeout)):
        if value is not None:
            timeouts[key] = _seconds(key, str(value))
    for key, value in (("writeback_cache", args.writeback_cache), ("direct_io", args.direct_io),
                       ("keep_cache", args.keep_cache)):
        if value:
            flags[key] = True
    if args.deadline <= 0:
        raise InvalidArgument("--deadline must be > 0")
    subdir = "/" + args.subdir.strip("/")
    return MountOptions(
        master=args.master, mountpoint=os.path.abspath(args.mountpoint), subdir=subdir, token=args.token,
        node=args.node, fuse_options=frozenset(fuse_options),
        attr_timeout=timeouts.get("attr_timeout", 1.0), entry_timeout=timeouts.get("entry_timeout", 1.0),
        negative_timeout=timeouts.get("negative_timeout", 0.0),
        writeback_cache=flags.get("writeback_cache", False), direct_io=flags.get("direct_io", False),
        keep_cache=flags.get("keep_cache", False), deadline_s=args.deadline, force=args.force,
        read_ahead_kb=args.read_ahead_kb, max_tasks=max(1, args.max_tasks), config=args.config,
        log_level=args.log_level.upper(), extra=extra)
