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
