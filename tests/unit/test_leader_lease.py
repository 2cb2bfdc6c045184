"""The leader lease (master/leaderlease.py) on a fake clock: it counts from when a renewal was sent,
is renewed every lease/3, and a leader whose lease ran out (stopped and continued, a database out of
reach, a renewal answered too late) fences itself before it sends anything more."""
from __future__ import annotations

import pytest

from curvine_py.core.errors import NotLeader, Unavailable
from curvine_py.master.leaderlease import Lease, LeaseKeeper
from tests.faketime import FakeTime


class Harness:
    def __init__(self, lease_s: float = 3.0) -> None:
        self.time = FakeTime()
        self.lease = Lease(lease_s, clock=self.time.clock)
        self.lease.granted(self.time.now)
        self.renewals: list[float] = []
        self.fences: list[str] = []
        self.fail: BaseException | None = None
        self.renew_takes = 0.0
        self.keeper = LeaseKeeper(self.lease, self.renew, self.fences.append)

    def renew(self) -> None:
        self.renewals.append(self.time.now)
        self.time.now += self.renew_takes
        if self.fail is not None:
            raise self.fail


def test_the_lease_counts_from_the_renewals_send_time() -> None:
    h = Harness()
    h.time.now += 1.0
    h.renew_takes = 0.4
    assert h.keeper.step() == pytest.approx(1.0)          # lease/3
    assert h.lease.left_s() == pytest.approx(3.0 - 0.4)   # from the send, not the answer
    assert h.fences == []


def test_a_lease_that_ran_out_fences_before_any_renewal_is_sent() -> None:
    """A master stopped for longer than its lease, continued: it sends nothing, it steps down."""
    h = Harness()
    h.time.now += 3.5
    assert h.lease.expired()
    assert h.keeper.step() == 0.0
    assert h.renewals == [] and len(h.fences) == 1 and h.keeper.fenced
    assert h.keeper.step() == 0.0 and len(h.fences) == 1  # once


def test_failed_renewals_retry_faster_and_fence_once_the_lease_ran_out() -> None:
    h = Harness()
    h.fail = Unavailable("the metadata database connection failed")
    waits = []
    while not h.keeper.fenced:
        waits.append(h.keeper.step())
        h.time.now += waits[-1]
    assert all(w <= 1.0 for w in waits) and len(waits) > 3
    assert h.time.now <= 100.0 + 3.0 + 1.0               # fenced no later than one wait past the lease
    assert len(h.fences) == 1


def test_a_renewal_answered_after_the_lease_does_not_count() -> None:
    h = Harness()
    h.renew_takes = 3.2
    h.keeper.step()
    assert h.keeper.fenced and h.lease.expired()


def test_another_leader_fences_at_once() -> None:
    h = Harness()
    h.fail = NotLeader("b:8995", "another master leads")
    assert h.keeper.step() == 0.0
    assert h.fences == ["another master leads"]


def test_a_lease_of_no_master_never_runs_out() -> None:
    lease = Lease(clock=FakeTime().clock)     # a `meta load`: nothing granted, nothing to run out
    assert not lease.expired()
    with pytest.raises(ValueError):
        Lease(0)
