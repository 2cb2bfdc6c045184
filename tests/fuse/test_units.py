"""The mount's pure pieces, without a kernel or processes: option parsing, inode mapping, the
error boundary, the attribute cache, setuid/setgid rules, lookup counts, reply buffers."""
from __future__ import annotations

import errno
import stat
from dataclasses import replace

import pyfuse3
import pytest
import trio

from curvine_py.core.domain import FileType, blank_attr
from curvine_py.core.errors import InvalidArgument, NotFound, StaleEpoch, Timeout, Unavailable
from curvine_py.core.posix import kill_suid_sgid, needs_kill
from curvine_py.fuse.attrs import InodeMap, Timeouts, entry_attributes
from curvine_py.fuse.errors import FAIL_FAST_ENV, boundary, fuse_errno
from curvine_py.fuse.options import parse
from curvine_py.fuse.readbuf import POOLED, ReplyBuffers
from curvine_py.fuse.state import AttrCache, LookupCounts


def test_options_defaults_and_fuse_style_strings() -> None:
    options = parse(["--master", "h:1", "/mnt/x"])
    assert options.negative_timeout == 0 and options.attr_timeout == 1.0 and not options.writeback_cache
    assert "default_permissions" in options.fuse_options and not options.read_only
    options = parse(["--master", "h:1", "/mnt/x", "-o", "ro,allow_other,attr_timeout=0.5,entry_timeout=2",
                     "-o", "writeback_cache,fsname=kv", "--negative-timeout", "3", "--subdir", "a/b/"])
    assert options.read_only and options.attr_timeout == 0.5 and options.entry_timeout == 2.0
    assert options.writeback_cache and options.negative_timeout == 3.0 and options.subdir == "/a/b"
    assert "fsname=kv" in options.libfuse_options() and "subtype=curvine" in options.libfuse_options()
    assert "allow_other" not in parse(["--master", "h:1", "/m", "-o", "noallow_other"]).fuse_options
    for bad in (["-o", "nonsense"], ["-o", "attr_timeout=x"], ["-o", "attr_timeout=-1"], ["--deadline", "0"]):
        with pytest.raises(InvalidArgument):
            parse(["--master", "h:1", "/m", *bad])


def test_inode_map_makes_the_mounted_directory_inode_1() -> None:
    inodes = InodeMap(root=42)
    assert inodes.to_master(1) == 42 and inodes.to_fuse(42) == 1
    assert inodes.to_master(7) == 7 and inodes.to_fuse(7) == 7
    attr = replace(blank_attr(42, FileType.DIRECTORY), mode=0o755, nlink=3, mtime_ns=5, ctime_ns=6)
    entry = entry_attributes(attr, inodes, Timeouts(1.0, 2.0, 0.0))
    assert entry.st_ino == 1 and stat.S_ISDIR(entry.st_mode) and entry.entry_timeout == 2.0
    entry = entry_attributes(replace(blank_attr(9, FileType.REGULAR), size=10, mtime_ns=5, ctime_ns=6), inodes,
                             Timeouts(1.0, 1.0, 0.0), size=99, mtime_ns=50)
    assert (entry.st_size, entry.st_mtime_ns, entry.st_ctime_ns, entry.st_blocks) == (99, 50, 50, 1)


def test_errno_table_and_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    assert fuse_errno(errno.EHOSTUNREACH) == errno.EIO and fuse_errno(errno.ETIMEDOUT) == errno.ETIMEDOUT
    assert fuse_errno(errno.ENOENT) == errno.ENOENT
    # A peer's socket gone is an I/O error, never ENOTCONN (which reads as "the mount is dead").
    assert fuse_errno(errno.ENOTCONN) == fuse_errno(errno.ENETUNREACH) == errno.EIO

    @boundary
    async def handler(exc: BaseException) -> None:
        raise exc

    def answer(exc: BaseException) -> int:
        with pytest.raises(pyfuse3.FUSEError) as info:
            trio.run(handler, exc)
        return info.value.errno

    monkeypatch.delenv(FAIL_FAST_ENV, raising=False)
    assert answer(NotFound("x")) == errno.ENOENT
    assert answer(Unavailable("down")) == errno.EIO
    assert answer(Timeout("slow")) == errno.ETIMEDOUT
    assert answer(StaleEpoch("epoch")) == errno.EIO
    assert answer(PermissionError(errno.EACCES, "no")) == errno.EACCES
    assert answer(KeyError("bug")) == errno.EIO, "a bug is answered EIO, the mount survives"
    assert answer(pyfuse3.FUSEError(errno.EXDEV)) == errno.EXDEV
    monkeypatch.setenv(FAIL_FAST_ENV, "1")
    with pytest.raises(KeyError):
        trio.run(handler, KeyError("bug"))


def test_attr_cache_expires_and_touches() -> None:
    now = [100.0]
    cache = AttrCache(1.0, clock=lambda: now[0])
    cache.put(replace(blank_attr(5), mtime_ns=10, ctime_ns=10, nlink=2))
    assert cache.get(5) is not None
    cache.touch(5, 20)
    cached = cache.get(5)
    assert cached is not None and (cached.mtime_ns, cached.ctime_ns, cached.nlink) == (20, 20, 2)
    now[0] += 1.5
    assert cache.get(5) is None
    off = AttrCache(0.0)
    off.put(blank_attr(1))
    assert off.get(1) is None


def test_setuid_setgid_rules_and_lookup_counts() -> None:
    assert kill_suid_sgid(0o6777) == 0o777
    assert kill_suid_sgid(0o2767) == 0o2767, "setgid without group-execute stays"
    assert needs_kill(0o4755) and needs_kill(0o2775) and not needs_kill(0o2765) and not needs_kill(0o755)
    counts = LookupCounts()
    counts.add(3)
    counts.add(3, 2)
    assert not counts.forget(3, 2) and counts.get(3) == 1
    assert counts.forget(3, 1) and counts.get(3) == 0 and len(counts) == 0


def test_reply_buffers_are_reused_only_after_being_deferred() -> None:
    pool = ReplyBuffers()
    first = pool.acquire(4096)
    assert len(first) == POOLED
    second = pool.acquire(4096)
    assert second.obj is not first.obj, "not deferred yet: a different buffer"
    pool.defer(first)
    assert pool.acquire(100).obj is first.obj
    assert len(pool.acquire(POOLED + 1)) == POOLED + 1
