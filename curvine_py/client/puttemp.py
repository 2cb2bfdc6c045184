"""The hidden temporary names of `fs put` (and of `load`, which puts file by file), and which of
them an interrupted put left behind.

A put writes into `.NAME.put-OWNER-RANDOM` beside NAME and renames it over NAME once every byte is
committed (client/fs.py), so a put that fails never shows as NAME. A put killed hard (SIGKILL, a
lost node) leaves that temporary behind: hidden and never read as NAME, but holding space and
quota. The next put of NAME removes the ones whose writer is gone:
- OWNER names the process that wrote it: a hash of the host's boot id and the client's node name,
  the pid, and the pid's start time (clock ticks since boot, so a reused pid is told apart). One
  whose host hash is ours is stale as soon as that pid no longer runs with that start time.
- One written elsewhere (another host, another node name, or a name from before owners were
  written) is stale only when nothing has touched it for `STALE_AFTER_S`, as S3 lifecycle rules
  judge incomplete multipart uploads by age: a slow upload on another node is left alone.
"""
from __future__ import annotations

import functools
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

import xxhash

from curvine_py.core.keys import NAME_MAX

STALE_AFTER_S = 3600.0
# The longest suffix an owner can make (".put-" + 8 hex + pid + ticks + 8 hex, dashes, the leading
# "."): the stem is cut for this one, so every put of NAME uses the same prefix whatever its pid.
_SUFFIX_MAX = len("..put-") + 8 + 1 + 7 + 1 + 20 + 1 + 8
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True, slots=True)
class Owner:
    host: str     # 8 hex digits: this boot of this host, as this client node
    pid: int
    start: int    # the process's start time, clock ticks after boot (/proc/PID/stat field 22)


def process_start(pid: int) -> int | None:
    """When `pid` started (clock ticks after boot); None when no such process runs."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[19])   # field 22; the first after the ")" is field 3


@functools.cache
def host_tag(node: str) -> str:
    """This boot of this host as client node `node` (read once: a load puts thousands of files)."""
    with open(_BOOT_ID) as f:
        boot = f.read().strip()
    return f"{xxhash.xxh3_64_intdigest(f'{boot}/{node}'.encode()) & 0xFFFFFFFF:08x}"


def this_process(node: str) -> Owner:
    return _owner(node, os.getpid())   # the pid in the key: a forked child is another writer


@functools.cache
def _owner(node: str, pid: int) -> Owner:
    start = process_start(pid)
    assert start is not None   # this process runs
    return Owner(host_tag(node), pid, start)


def prefix(name: str) -> str:
    """What every temporary of `name` starts with (NAME cut so that the longest suffix fits)."""
    stem = name
    while len(stem.encode("utf-8", "surrogateescape")) + _SUFFIX_MAX > NAME_MAX:
        stem = stem[:-1]
    return f".{stem}.put-"


def temporary_name(name: str, owner: Owner) -> str:
    return f"{prefix(name)}{owner.host}-{owner.pid}-{owner.start}-{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class Temporary:
    owner: Owner | None   # None: a temporary named before owners were written


def temporary_of(name: str, candidate: str) -> Temporary | None:
    """`candidate` as a temporary of a put of `name`; None when it is not one."""
    head = prefix(name)
    if not candidate.startswith(head):
        return None
    tail = candidate[len(head):]
    match = re.fullmatch(r"([0-9a-f]{8})-([0-9]{1,7})-([0-9]{1,20})-[0-9a-f]{8}", tail)
    if match:
        return Temporary(Owner(match[1], int(match[2]), int(match[3])))
    if re.fullmatch(r"[0-9a-f]{12}", tail):     # `.NAME.put-RANDOM`
        return Temporary(None)
    return None


def is_stale(owner: Owner | None, touched_ns: int, *, now_ns: int, here: str,
             started: Callable[[int], int | None] = process_start) -> bool:
    """Whether a temporary with this owner, last changed at `touched_ns` (its mtime or ctime,
    whichever is later), was left by a writer that is gone. `here`: this host's tag."""
    if owner is not None and owner.host == here:
        return started(owner.pid) != owner.start
    return now_ns - touched_ns > STALE_AFTER_S * 1e9
