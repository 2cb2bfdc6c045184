"""Pure POSIX rules about modes and names, written once for every role that needs them (the
mount applies the setuid/setgid clearing and checks rename flags before a round trip; the master
applies setgid inheritance and the rename flags in its transactions).

No I/O and no generated code here: plain integers in, plain values out.
"""
from __future__ import annotations

import stat
from dataclasses import dataclass

from curvine_py.core.domain import InodeId
from curvine_py.core.errors import InvalidArgument

ROOT_INO = InodeId(1)               # the root directory's inode number, everywhere (FUSE's too)
RENAME_NOREPLACE = 1         # renameat2(2) flags; the same values travel on the wire (master.proto)
RENAME_EXCHANGE = 2


@dataclass(frozen=True, slots=True)
class SetAttrChanges:
    """A setattr: the attributes to change, None = unchanged (the kernel's request in the mount,
    the SetAttr RPC in the master). `*_now`: set that time to the master's clock."""

    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    size: int | None = None
    atime_ns: int | None = None
    mtime_ns: int | None = None
    atime_now: bool = False
    mtime_now: bool = False
    ctime_ns: int | None = None


def check_rename_flags(flags: int) -> None:
    """renameat2(2): only NOREPLACE and EXCHANGE are known, and they exclude each other (EINVAL)."""
    if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE) or flags == RENAME_NOREPLACE | RENAME_EXCHANGE:
        raise InvalidArgument(f"bad rename flags {flags:#x}")


def inherit_from_parent(parent_mode: int, parent_gid: int, gid: int, perm: int,
                        directory: bool) -> tuple[int, int]:
    """(gid, permission bits) of a new inode in a directory of `parent_mode`/`parent_gid`, asked for
    by a caller of group `gid` with `perm`: in a setgid directory the group is the directory's, and
    a new subdirectory is setgid too (so the rule carries down the tree); otherwise unchanged."""
    perm &= 0o7777
    if parent_mode & stat.S_ISGID:
        gid = parent_gid
        if directory:
            perm |= stat.S_ISGID
    return gid, perm


def kill_suid_sgid(mode: int) -> int:
    """Permission bits after a write/truncate by an unprivileged process or a chown (Linux rules:
    setuid always goes; setgid only with group-execute, otherwise it is mandatory locking)."""
    mode &= ~stat.S_ISUID
    if mode & stat.S_IXGRP:
        mode &= ~stat.S_ISGID
    return mode


def needs_kill(mode: int) -> bool:
    """True when `kill_suid_sgid` would change `mode` (a write must then send a SetAttr first)."""
    return bool(mode & stat.S_ISUID) or (mode & (stat.S_ISGID | stat.S_IXGRP)) == (stat.S_ISGID | stat.S_IXGRP)


ATIME_MODES = ("relatime", "strictatime", "noatime")
RELATIME_MAX_AGE_NS = 24 * 3600 * 10**9      # relatime still updates an atime older than a day


def atime_due(mode: str, atime_ns: int, mtime_ns: int, ctime_ns: int, now_ns: int) -> bool:
    """Whether a read at `now_ns` moves the access time (mount(8)): never with noatime, always
    with strictatime; with relatime (the Linux default) only when the atime is not after the
    mtime or the ctime (the first read after a change), or is more than a day old."""
    if mode == "noatime":
        return False
    if mode == "strictatime":
        return now_ns > atime_ns
    if mode != "relatime":
        raise InvalidArgument(f"unknown atime mode {mode!r} (one of {', '.join(ATIME_MODES)})")
    return atime_ns <= mtime_ns or atime_ns <= ctime_ns or now_ns - atime_ns > RELATIME_MAX_AGE_NS
