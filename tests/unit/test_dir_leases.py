"""Directory leases, both sides as pure logic with a fake clock: the master's table
(master/leases.py: grant, recall and wait, re-check, cool-downs, restart grace) and the mount's
(fuse/leases.py: when to ask, answers, own changes, renewal, bounds)."""
from __future__ import annotations

import threading
import time

import pytest

from curvine_py.core.errors import Timeout
from curvine_py.fuse import leases as mount_leases
from curvine_py.fuse.leases import DirLeaseTable
from curvine_py.master import leases as master_leases
from curvine_py.master.leases import DirLeases, LeaseBusy
from tests.unit.test_fuse_names import Clock

D = 42


# -- master side ---------------------------------------------------------------------------------

def test_a_grant_blocks_other_sessions_until_released() -> None:
    clock = Clock()
    leases = DirLeases(2.0, clock=clock)
    assert leases.may_grant(D, "b")
    leases.grant(D, "b")
    assert leases.held() == 1
    assert not leases.may_grant(D, "a"), "one holder at a time"
    leases.check(D, "b")    # the holder's own creates go ahead
    with pytest.raises(LeaseBusy):
        leases.check(D, "a")
    assert leases.poll_recall(D, "a", clock.now + 5) == clock.now + 2.0, "A waits while B holds the lease"
    assert leases.renew("b", [D]) == [], "a recalled lease is not renewed"
    leases.release("b", [D])
    assert leases.poll_recall(D, "a", clock.now + 5) is None, "A goes ahead once B gives the lease back"
    leases.check(D, "a")
    assert leases.held() == 0


def test_a_release_wakes_a_waiting_caller() -> None:
    """The one threaded case: recall_and_wait sleeps on the condition until the holder releases
    (a 30 s term and a 60 s deadline, so only the release can end the wait in time)."""
    clock = Clock()
    leases = DirLeases(30.0, clock=clock)
    leases.grant(D, "b")
    done = threading.Event()

    def create_on_a() -> None:
        leases.recall_and_wait(D, "a", clock.now + 60)
        done.set()

    thread = threading.Thread(target=create_on_a)
    thread.start()
    deadline = time.monotonic() + 10
    while not leases._leases[D].recalled:       # A has looked and is waiting
        assert time.monotonic() < deadline, "A never recalled the lease"
        time.sleep(0.01)
    assert not done.is_set()
    leases.release("b", [D])
    assert done.wait(10), "A goes ahead as soon as B gives the lease back"
    thread.join()


def test_a_dead_holder_delays_others_by_at_most_its_term() -> None:
    clock = Clock()
    leases = DirLeases(0.3, clock=clock)
    leases.grant(D, "b")
    granted_at = clock.now
    assert leases.poll_recall(D, "a", clock.now + 5) == granted_at + 0.3
    clock.now += 0.2
    assert leases.poll_recall(D, "a", clock.now + 5) == granted_at + 0.3, "still live: wait for its end"
    clock.now += 0.1
    assert leases.poll_recall(D, "a", clock.now + 5) is None, "its term is over: go ahead"


def test_recall_gives_up_at_the_deadline() -> None:
    clock = Clock()
    leases = DirLeases(30.0, clock=clock)
    leases.grant(D, "b")
    deadline = clock.now + 0.1
    assert leases.poll_recall(D, "a", deadline) == deadline
    clock.now = deadline
    with pytest.raises(Timeout):
        leases.poll_recall(D, "a", deadline)


def test_renewal_extends_only_live_unrecalled_leases_of_the_session() -> None:
    clock = Clock()
    leases = DirLeases(2.0, clock=clock)
    leases.grant(1, "b")
    leases.grant(2, "b")
    clock.now += 1.5
    assert leases.renew("b", [1, 2, 3]) == [1, 2], "unknown directories are lost"
    assert leases.renew("x", [1]) == [], "another session cannot renew B's lease"
    clock.now += 1.5
    assert leases.renew("b", [1]) == [1], "renewed 1.5 s ago: still live"
    clock.now += 2.5
    assert leases.renew("b", [1]) == [], "expired"


def test_recalled_directories_cool_down_and_shared_ones_are_not_leased() -> None:
    clock = Clock()
    leases = DirLeases(2.0, clock=clock)
    leases.grant(D, "b")
    clock.now += 3          # expired: A's call neither waits nor recalls
    leases.recall_and_wait(D, "a", clock.now + 1)
    leases.check(D, "a")
    assert not leases.may_grant(D, "b"), "A added a name recently: the directory is shared"
    assert leases.may_grant(D, "a"), "A's own recent names do not count against A"
    clock.now += master_leases.FIRST_COOL_DOWN_S
    assert leases.may_grant(D, "b")


def test_a_directory_two_sessions_wrote_lately_is_shared_whoever_wrote_last() -> None:
    clock = Clock()
    leases = DirLeases(2.0, clock=clock)
    leases.check(D, "a")
    clock.now += 1
    leases.check(D, "b")
    clock.now += 1
    leases.check(D, "a")
    assert not leases.may_grant(D, "a"), "B wrote here 1 s ago, even though A wrote last"
    clock.now += master_leases.FIRST_COOL_DOWN_S + 1
    leases.check(D, "a")
    assert leases.may_grant(D, "a"), "only A lately"


def _recall(leases: DirLeases, clock: Clock) -> None:
    """B holds the lease, A's create recalls it, B gives it back (all at the fake clock's now)."""
    leases.grant(D, "b")
    waiter = threading.Thread(target=leases.recall_and_wait, args=(D, "a", clock.now + 60))
    waiter.start()
    while not leases._leases[D].recalled:
        time.sleep(0.01)
    leases.release("b", [D])
    waiter.join(5)
    assert not waiter.is_alive()


def test_cool_down_doubles_with_each_recall() -> None:
    clock = Clock()
    leases = DirLeases(2.0, clock=clock)
    for length in (1, 2, 4):
        _recall(leases, clock)
        clock.now += length * master_leases.FIRST_COOL_DOWN_S - 1
        assert not leases.may_grant(D, "b")
        clock.now += 1
        assert leases.may_grant(D, "b")


def test_a_restarted_master_holds_name_changes_back_for_the_old_term() -> None:
    clock = Clock()
    leases = DirLeases(2.0, grace_s=0.3, clock=clock)
    assert not leases.grace_over()
    started = clock.now
    assert leases.poll_recall(D, "a", started + 5) == started + 0.3, "held back until the grace is over"
    clock.now += 0.3
    assert leases.poll_recall(D, "a", started + 5) is None
    assert leases.grace_over()


def test_disabled_leases() -> None:
    assert not DirLeases(0.0).enabled


# -- mount side ----------------------------------------------------------------------------------

def _table() -> tuple[DirLeaseTable, Clock]:
    clock = Clock()
    return DirLeaseTable(clock=clock), clock


def _hold(table: DirLeaseTable, clock: Clock, names: list[str], term: float = 2.0) -> None:
    for _ in range(mount_leases.MISSES_TO_LEASE - 1):
        assert not table.note_miss(D)
    assert table.note_miss(D), "asks after MISSES_TO_LEASE misses"
    assert not table.note_miss(D), "one request at a time"
    assert table.granted(D, names, term, sent_at=clock.now)


def test_mount_answers_absent_names_only_under_a_live_lease() -> None:
    table, clock = _table()
    assert not table.absent(D, "x")
    _hold(table, clock, ["a", "b"])
    assert table.absent(D, "x")
    assert not table.absent(D, "a"), "a listed name goes to the master for its attributes"
    assert not table.absent(D + 1, "x"), "other directories are not covered"
    clock.now += 2.0 * (1 - mount_leases.MARGIN)
    assert not table.absent(D, "x"), "stops before the master's term ends"
    assert D not in table.held_directories()


def test_mount_counts_misses_in_a_window() -> None:
    table, clock = _table()
    for _ in range(mount_leases.MISSES_TO_LEASE - 1):
        assert not table.note_miss(D)
        clock.now += mount_leases.MISS_WINDOW_S / 2
    assert not table.note_miss(D), "misses spread over more than the window do not add up"
    disabled = DirLeaseTable(enabled=False, clock=clock)
    assert not any(disabled.note_miss(D) for _ in range(100))


def test_mount_own_names_join_the_lease_even_while_it_is_asked_for() -> None:
    table, clock = _table()
    for _ in range(mount_leases.MISSES_TO_LEASE):
        table.note_miss(D)
    table.added(D, "made-while-asking")        # the grant's listing may predate this create
    assert table.granted(D, ["old"], 2.0, clock.now)
    assert not table.absent(D, "made-while-asking")
    table.added(D, "made-after")
    assert not table.absent(D, "made-after")
    assert table.absent(D, "never-made")


def test_mount_drops_a_lease_on_a_change_of_unknown_outcome() -> None:
    table, clock = _table()
    _hold(table, clock, [])
    table.lost(D)
    assert not table.absent(D, "x")
    assert not any(table.note_miss(D) for _ in range(20)), "does not ask again at once"
    clock.now += mount_leases.RETRY_AFTER_S + 1
    assert any(table.note_miss(D) for _ in range(mount_leases.MISSES_TO_LEASE))
    table.lost(D)                                   # while asking: the grant must not be used
    assert not table.granted(D, [], 2.0, clock.now)
    assert not table.absent(D, "x")


def test_mount_renewal_keeps_some_and_loses_the_rest() -> None:
    table, clock = _table()
    _hold(table, clock, [])
    other = D + 1
    for _ in range(mount_leases.MISSES_TO_LEASE):
        table.note_miss(other)
    assert table.granted(other, [], 2.0, clock.now)
    clock.now += 1.0
    gone = table.renewed([D, other], kept=[D], term_s=2.0, sent_at=clock.now)
    assert gone == [other]
    assert table.absent(D, "x") and not table.absent(other, "x")
    clock.now += 1.5
    assert table.absent(D, "x"), "renewed from the renewal's send time"
    table.lost(D)
    assert not table.absent(D, "x")


def test_mount_bounds_the_names_it_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mount_leases, "MAX_NAMES", 10)
    table, clock = _table()
    for _ in range(mount_leases.MISSES_TO_LEASE):
        table.note_miss(D)
    assert not table.granted(D, [f"n{i}" for i in range(11)], 2.0, clock.now), "too many: released"
    assert not table.absent(D, "x")
