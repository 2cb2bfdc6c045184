"""core/posix.py: the setuid/setgid clearing, setgid inheritance and rename flags, as properties
over every mode (hypothesis) plus the cases the Linux man pages spell out."""
from __future__ import annotations

import stat

import pytest
from hypothesis import given
from hypothesis import strategies as st

from curvine_py.core.errors import InvalidArgument
from curvine_py.core.posix import (
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    atime_due,
    check_rename_flags,
    inherit_from_parent,
    kill_suid_sgid,
    needs_kill,
)

modes = st.integers(min_value=0, max_value=0o7777)


@given(modes)
def test_kill_clears_setuid_and_executable_setgid_only(mode: int) -> None:
    after = kill_suid_sgid(mode)
    assert not after & stat.S_ISUID
    assert bool(after & stat.S_ISGID) == bool(mode & stat.S_ISGID and not mode & stat.S_IXGRP)
    assert after & ~(stat.S_ISUID | stat.S_ISGID) == mode & ~(stat.S_ISUID | stat.S_ISGID)
    assert needs_kill(mode) == (after != mode)
    assert kill_suid_sgid(after) == after


def test_kill_examples() -> None:
    assert kill_suid_sgid(0o6755) == 0o755
    assert kill_suid_sgid(0o2745) == 0o2745, "setgid without group-execute is mandatory locking: kept"
    assert not needs_kill(0o2745) and needs_kill(0o4000)


@given(modes, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), modes, st.booleans())
def test_setgid_inheritance(parent_mode: int, parent_gid: int, gid: int, perm: int, directory: bool) -> None:
    new_gid, new_perm = inherit_from_parent(parent_mode, parent_gid, gid, perm, directory)
    if parent_mode & stat.S_ISGID:
        assert new_gid == parent_gid
        assert new_perm == (perm | stat.S_ISGID if directory else perm)
    else:
        assert (new_gid, new_perm) == (gid, perm)


def test_setgid_inheritance_masks_the_type_bits() -> None:
    assert inherit_from_parent(0o2775, 50, 7, stat.S_IFDIR | 0o755, True) == (50, 0o2755)


@given(st.integers(0, 2**32 - 1))
def test_rename_flags(flags: int) -> None:
    if flags in (0, RENAME_NOREPLACE, RENAME_EXCHANGE):
        check_rename_flags(flags)
    else:
        with pytest.raises(InvalidArgument):
            check_rename_flags(flags)


DAY = 24 * 3600 * 10**9


@given(st.integers(0, 10**18), st.integers(0, 10**18), st.integers(0, 10**18), st.integers(0, 2 * DAY))
def test_atime_modes(atime: int, mtime: int, ctime: int, later: int) -> None:
    now = max(atime, mtime, ctime) + later
    assert not atime_due("noatime", atime, mtime, ctime, now)
    assert atime_due("strictatime", atime, mtime, ctime, now) == (now > atime)
    relatime = atime_due("relatime", atime, mtime, ctime, now)
    assert relatime == (atime <= mtime or atime <= ctime or now - atime > DAY)
    if relatime:
        assert atime_due("strictatime", atime, mtime, ctime, now) or now == atime


def test_atime_examples_and_bad_mode() -> None:
    assert atime_due("relatime", 5, 10, 10, 11), "first read after a write"
    assert not atime_due("relatime", 12, 10, 10, 13), "read again soon after: no update"
    assert atime_due("relatime", 12, 10, 10, 12 + DAY + 1), "a day later: updated once more"
    with pytest.raises(InvalidArgument, match="atime mode"):
        atime_due("lazytime", 0, 0, 0, 1)
