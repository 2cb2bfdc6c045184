"""client/puttemp.py: the temporaries of a put name their writer, are recognised only for their own
name, fit NAME_MAX beside a 255-byte name, and are stale when their writer on this host is gone or,
written elsewhere, when nobody touched them for an hour."""
from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from curvine_py.client import puttemp
from curvine_py.client.puttemp import STALE_AFTER_S, Owner, Temporary
from curvine_py.core.keys import NAME_MAX

HOUR_NS = int(STALE_AFTER_S * 1e9)


def test_this_process_is_its_own_live_owner() -> None:
    me = puttemp.this_process("node-a")
    assert me.pid == os.getpid() and puttemp.process_start(me.pid) == me.start
    assert me.host == puttemp.host_tag("node-a") != puttemp.host_tag("node-b")   # a node name is part of it
    assert puttemp.process_start(2**22 + 1) is None     # above pid_max: no such process


@given(st.text(alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
               min_size=1, max_size=255).filter(lambda n: len(n.encode()) <= NAME_MAX))
def test_a_temporary_fits_beside_any_legal_name_and_names_its_owner(name: str) -> None:
    owner = Owner("0123abcd", 4_194_304, 2**64 - 1)      # the longest pid and start there are
    temporary = puttemp.temporary_name(name, owner)
    assert len(temporary.encode()) <= NAME_MAX
    assert temporary.startswith(".") and temporary.startswith(puttemp.prefix(name))
    assert puttemp.temporary_of(name, temporary) == Temporary(owner)


def test_only_the_temporaries_of_that_name_are_recognised() -> None:
    owner = Owner("0123abcd", 42, 7)
    assert puttemp.temporary_of("w.bin", puttemp.temporary_name("w.bin", owner)) == Temporary(owner)
    assert puttemp.temporary_of("w.bin", ".w.bin.put-0123456789ab") == Temporary(None)   # before owners
    for other in ("w.bin", ".w.bin.put-", ".w.bin.put-0123abcd-42-7", ".w.bin.put-0123abcd-42-7-zzzzzzzz",
                  ".w.bin.put-0123456789ab-", ".w.bin.part-0123456789ab", puttemp.temporary_name("w.bi", owner),
                  puttemp.temporary_name("w.bin2", owner)):
        assert puttemp.temporary_of("w.bin", other) is None, other


def test_stale_on_this_host_when_the_writer_is_gone_elsewhere_after_an_hour() -> None:
    here = "0123abcd"
    running = {42: 7}
    alive = Owner(here, 42, 7)
    now = 10 * HOUR_NS

    def stale(owner: Owner | None, touched: int) -> bool:
        return puttemp.is_stale(owner, touched, now_ns=now, here=here, started=running.get)

    assert not stale(alive, 0)                         # its writer runs: never, however old
    assert stale(Owner(here, 42, 8), now)              # the pid was reused by another process
    assert stale(Owner(here, 43, 7), now)              # the writer is gone: at once
    elsewhere = Owner("ffff0000", 42, 7)
    assert not stale(elsewhere, now - HOUR_NS + 1)     # another host's: an hour first
    assert stale(elsewhere, now - HOUR_NS - 1)
    assert not stale(None, now - 60 * 10**9) and stale(None, now - HOUR_NS - 1)
