"""cli/report.CtrlC, with real SIGINTs sent to this process: a Ctrl-C during a master call lets the
call finish and interrupts right after it; outside a call it interrupts at once; a second one
during the call interrupts the call; the previous handler is back afterwards."""
from __future__ import annotations

import os
import signal
import time

import pytest

from curvine_py.cli.report import CtrlC


def ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)   # the handler runs before kill returns to Python code


def test_a_ctrl_c_during_a_call_lets_it_finish_and_interrupts_right_after() -> None:
    finished = []

    def call() -> str:
        ctrl_c()
        finished.append("after the signal")
        return "report"

    with CtrlC() as guard, pytest.raises(KeyboardInterrupt):
        guard.call(call)
    assert finished == ["after the signal"]


def test_outside_a_call_a_ctrl_c_interrupts_at_once() -> None:
    with CtrlC() as guard:
        assert guard.call(lambda: 7) == 7
        with pytest.raises(KeyboardInterrupt):
            ctrl_c()
            time.sleep(5)   # not reached: the handler raised


def test_a_second_ctrl_c_during_the_call_interrupts_the_call() -> None:
    reached = []

    def call() -> None:
        ctrl_c()
        ctrl_c()
        reached.append("not reached")

    with CtrlC() as guard, pytest.raises(KeyboardInterrupt):
        guard.call(call)
    assert reached == []


def test_the_previous_handler_is_back_afterwards() -> None:
    before = signal.getsignal(signal.SIGINT)
    with CtrlC():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before
