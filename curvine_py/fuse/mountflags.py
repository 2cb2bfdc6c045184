"""The mount's settings table: every `curvine-py mount` setting once, from which both its
`--flag` and its `-o name[=value]` form are made.

A setting given both ways is the same setting: `-o attr_timeout=2` and `--attr-timeout 2` write
the same MountConfig field, so `mount -t fuse`-style option strings (CSI mountOptions) reach every
setting a flag does. Settings that are secrets or name the mount itself (token, master, config)
are flags only: an `-o` string ends up in /proc/mounts and mtab.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from curvine_py.config import MountConfig
from curvine_py.core.errors import InvalidArgument

_DEFAULTS = MountConfig()
ATIME_MODES = ("relatime", "strictatime", "noatime")


def seconds(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidArgument(f"{name}={text!r} is not a number of seconds") from None
    if value < 0:
        raise InvalidArgument(f"{name} must be >= 0")
    return value


def whole_number(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidArgument(f"{name}={text!r} is not a whole number") from None


def text(name: str, value: str) -> str:
    del name
    return value


@dataclass(frozen=True, slots=True)
class Setting:
    """One mount setting. `parse` is None for a switch: present means `value`."""
    field: str                                    # the MountConfig field it sets
    flag: str                                     # --flag-name
    help: str
    option: str | None = None                     # -o name; None: a flag only
    parse: Callable[[str, str], Any] | None = text
    value: Any = True                             # a switch's value


SETTINGS: tuple[Setting, ...] = (
    Setting("master", "--master", "HOST:PORT of the master, or a comma list of several masters "
                                  "(the leader is found and followed); env CURVINE_MASTER"),
    Setting("subdir", "--subdir", "mount this directory of the namespace (default /)", option="subdir"),
    Setting("token", "--token", "shared secret (env CURVINE_TOKEN; visible in ps: prefer --token-file)"),
    Setting("node", "--node", "node name for placement/short-circuit (default: hostname)", option="node"),
    Setting("attr_timeout", "--attr-timeout",
            f"seconds the kernel caches attributes (default {_DEFAULTS.attr_timeout:g})",
            option="attr_timeout", parse=seconds),
    Setting("entry_timeout", "--entry-timeout",
            f"seconds the kernel caches names (default {_DEFAULTS.entry_timeout:g})",
            option="entry_timeout", parse=seconds),
    Setting("negative_timeout", "--negative-timeout",
            "seconds a missing name is cached (default 0: never, as LMCache needs)",
            option="negative_timeout", parse=seconds),
    Setting("writeback_cache", "--writeback-cache",
            "kernel write-back cache (faster small writes, slower large ones)",
            option="writeback_cache", parse=None),
    Setting("direct_io", "--direct-io", "bypass the page cache", option="direct_io", parse=None),
    Setting("keep_cache", "--keep-cache",
            "keep the page cache at every open (other nodes' writes may be missed)",
            option="keep_cache", parse=None),
    Setting("validate_cache", "--no-keep-cache",
            "drop the page cache at every open (default: kept for files unchanged since cached)",
            option="no_keep_cache", parse=None, value=False),
    Setting("atime", "--atime", f"atime updates: {', '.join(ATIME_MODES)} (default {_DEFAULTS.atime}; "
                                "as -o, the bare word)"),
    Setting("deadline_s", "--deadline",
            f"seconds any operation may take before it fails (default {_DEFAULTS.deadline_s:g})",
            option="deadline", parse=seconds),
    Setting("read_ahead_kb", "--read-ahead-kb",
            f"kernel read-ahead of the mount (default {_DEFAULTS.read_ahead_kb})",
            option="read_ahead_kb", parse=whole_number),
    Setting("max_tasks", "--max-tasks", f"concurrent FUSE requests served (default {_DEFAULTS.max_tasks})",
            option="max_tasks", parse=whole_number),
    Setting("log_level", "--log-level", "DEBUG, INFO, WARNING... (env CURVINE_LOG_LEVEL)"),
    Setting("metrics_port", "--metrics-port",
            "Prometheus /metrics port (0 = off, -1 = any free port)", option="metrics_port",
            parse=whole_number),
    Setting("metrics_host", "--metrics-host",
            f"address of the /metrics port (default {_DEFAULTS.metrics_host})", option="metrics_host"),
)
_BY_OPTION = {s.option: s for s in SETTINGS if s.option}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One argparse flag per setting; an absent flag is None, so lower layers (TOML, env) count."""
    for s in SETTINGS:
        if s.parse is None:
            parser.add_argument(s.flag, dest=s.field, action="store_const", const=s.value, help=s.help)
        elif s.field == "atime":
            parser.add_argument(s.flag, dest=s.field, choices=ATIME_MODES, help=s.help)
        else:
            parser.add_argument(s.flag, dest=s.field, help=s.help)


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags, each through its setting's parser."""
    values: dict[str, Any] = {}
    for s in SETTINGS:
        given = getattr(args, s.field)
        if given is None:
            continue
        values[s.field] = given if s.parse is None else s.parse(s.option or s.field, given)
    return values


def option_value(key: str, eq: str, value: str) -> tuple[str, Any] | None:
    """(field, value) for a `-o` item naming a setting; None if it names none (a libfuse option)."""
    if key in ATIME_MODES and not eq:
        return "atime", key
    setting = _BY_OPTION.get(key)
    if setting is None:
        return None
    if setting.parse is None:
        if eq:
            raise InvalidArgument(f"mount option {key}={value} is refused: {key} takes no value")
        return setting.field, setting.value
    if not eq:
        raise InvalidArgument(f"mount option {key!r} needs a value ({key}=...)")
    return setting.field, setting.parse(key, value)


def option_names() -> Iterable[str]:
    return [*(f"{s.option}" if s.parse is None else f"{s.option}=..." for s in SETTINGS if s.option),
            *ATIME_MODES]
