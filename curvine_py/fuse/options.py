"""`curvine-py mount` flags -> MountOptions, and MountOptions -> the option set handed to libfuse.

Defaults follow what LMCache's fs:// connector and a POSIX user need: the kernel checks
permissions (default_permissions), attributes and names are cached 1 s, negative lookups are NOT
cached (LMCache polls with stat for a name another node may create at any moment), the page cache
is kept across opens only of a file unchanged since it was cached (validate_cache, close-to-open
with other nodes; `-o no_keep_cache` drops it at every open), 1 MiB requests and a raised
read-ahead. Every setting has a flag and an `-o` form, both made from one table (fuse/mountflags.py),
so `mount -t fuse`-style option strings (CSI) reach what flags do.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from curvine_py.config import MountConfig, add_token_file_option, load, parse_master_list
from curvine_py.core.errors import InvalidArgument
from curvine_py.fuse import mountflags
from curvine_py.observe.httpserve import check_port
from curvine_py.observe.logs import add_log_format_flag

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
    """What a mount runs with: the settings (defaults in config.MountConfig, layered with the
    TOML file, CURVINE_* env and flags) and the option set for libfuse."""
    master: str
    mountpoint: str
    subdir: str
    token: str = field(repr=False)   # never in a repr, so never in a log line
    node: str
    fuse_options: frozenset[str]
    attr_timeout: float
    entry_timeout: float
    negative_timeout: float
    writeback_cache: bool
    direct_io: bool
    keep_cache: bool
    validate_cache: bool
    deadline_s: float
    force: bool
    read_ahead_kb: int
    max_tasks: int
    max_background: int
    config: str | None
    log_level: str
    read_ahead: int               # bytes the mount fetches ahead of a sequential reader
    data_threads: int
    trio_reads: bool
    switch_interval: float
    atime: str                    # relatime, strictatime or noatime
    fetch_ahead: int = 0          # bytes fetched ahead of each read in threads (fuse/prefetch.py)
    fetch_budget: int = 0
    fetch_threads: int = 2
    fetch_local: bool = False
    metrics_port: int = 0         # Prometheus /metrics (observe/); 0 = off, -1 = any free port
    metrics_host: str = "127.0.0.1"
    log_format: str | None = None  # text or json (observe/logs.py); None: CURVINE_LOG_FORMAT, else text

    @property
    def read_only(self) -> bool:
        return "ro" in self.fuse_options

    def libfuse_options(self) -> set[str]:
        options = set(self.fuse_options)
        options.discard("rw")
        if not any(o.startswith("fsname=") for o in options):
            options.add(f"fsname=curvine:{self.subdir}")
        if "subtype=" in options:
            # `-o subtype=` (empty): no subtype, so the mount's type is plain `fuse` (tools and test
            # harnesses that match the type); libfuse itself refuses an empty value.
            options.discard("subtype=")
        elif not any(o.startswith("subtype=") for o in options):
            options.add("subtype=curvine")
        return options


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py mount", description="Mount the curvine namespace with FUSE.")
    p.add_argument("mountpoint")
    mountflags.add_flags(p)
    add_token_file_option(p)
    p.add_argument("-o", dest="options", action="append", default=[],
                   help="comma-separated mount options: the settings above by their -o names ("
                        + ", ".join(mountflags.option_names())
                        + ") and libfuse's own (allow_other, noallow_other, default_permissions, ro, rw, "
                          "fsname=..., ...)")
    p.add_argument("--force", action="store_true",
                   help="recover a stale mountpoint (or replace a live mount): lazy unmount, then mount")
    p.add_argument("--config", help="TOML config file ([mount] and [client] sections)")
    add_log_format_flag(p)
    return p


def parse(argv: list[str], env: Mapping[str, str] | None = None) -> MountOptions:
    args = parser().parse_args(argv)
    # Root mounts serve every user by default (a shared cluster, CSI volumes); the kernel still
    # checks permissions (default_permissions). `-o noallow_other` keeps it to the mounting user.
    fuse_options = {"default_permissions"} | ({"allow_other"} if os.geteuid() == 0 else set())
    given: dict[str, dict[str, Any]] = {"-o": {}, "flags": mountflags.flag_values(args)}
    for group in args.options:
        for item in (o.strip() for o in group.split(",")):
            if not item:
                continue
            key, eq, value = item.partition("=")
            setting = mountflags.option_value(key, eq, value)
            if setting is not None:
                given["-o"][setting[0]] = setting[1]
            elif key == "noallow_other" and not eq:
                fuse_options.discard("allow_other")
            elif (key in _LIBFUSE_FLAGS and not eq) or (key in _LIBFUSE_VALUED and eq):
                if key == "rw":
                    fuse_options.discard("ro")
                elif key == "ro":
                    fuse_options.discard("rw")
                elif eq:            # a valued option given again: the last one counts
                    fuse_options -= {o for o in fuse_options if o.startswith(key + "=")}
                fuse_options.add(item)
            else:
                raise InvalidArgument(f"unknown mount option {item!r}")
    # -o and flags are one layer (the command line); a flag given too wins over its -o form.
    flags: dict[str, Any] = {**given["-o"], **given["flags"], "token_file": args.token_file}
    cfg = load(MountConfig, section="mount", toml_path=args.config, flags=flags, env=env)
    if cfg.keep_cache and not cfg.validate_cache:
        raise InvalidArgument("keep_cache and no_keep_cache contradict each other: give one")
    if not cfg.master:
        raise InvalidArgument("--master HOST:PORT is required (or CURVINE_MASTER)")
    return MountOptions(
        master=",".join(parse_master_list(cfg.master)), mountpoint=os.path.abspath(args.mountpoint), subdir="/" + cfg.subdir.strip("/"),
        token=cfg.token, node=cfg.node, fuse_options=frozenset(fuse_options),
        attr_timeout=cfg.attr_timeout, entry_timeout=cfg.entry_timeout, negative_timeout=cfg.negative_timeout,
        writeback_cache=cfg.writeback_cache, direct_io=cfg.direct_io, keep_cache=cfg.keep_cache,
        validate_cache=cfg.validate_cache,
        deadline_s=cfg.deadline_s, force=args.force, read_ahead_kb=cfg.read_ahead_kb, max_tasks=cfg.max_tasks,
        max_background=cfg.max_background, config=args.config, log_level=cfg.log_level.upper(),
        read_ahead=cfg.fuse_read_ahead, data_threads=cfg.fuse_data_threads, trio_reads=cfg.fuse_trio_reads,
        switch_interval=cfg.fuse_switch_interval, atime=cfg.atime, fetch_ahead=cfg.fuse_fetch_ahead,
        fetch_budget=cfg.fuse_fetch_budget, fetch_threads=cfg.fuse_fetch_threads, fetch_local=cfg.fuse_fetch_local,
        metrics_port=check_port(cfg.metrics_port, "--metrics-port"), metrics_host=cfg.metrics_host,
        log_format=args.log_format)
