"""Standby masters: several masters on one PostgreSQL database, one of them leading.

A master started on PostgreSQL first listens as a follower (master/follower.py: every call refused
UNAVAILABLE, naming the leader), then tries to take the leadership (the engine's advisory lock on
its writer session, master/store/pgengine.py) every `retry_s` until it succeeds or is stopped.
Meanwhile it keeps the leader's address it read from the database for the follower's answers.

Once it leads, the master is built as a restarted one is (membership from the worker rows and the
heartbeats that follow, the predecessor's directory-lease term waited out) and its real server
takes the port over from the follower. A leader that loses the lock (its session broke and another
master took over meanwhile) stops at once with EXIT_LOST_LEADERSHIP: what it holds in memory may no
longer be true, and its supervisor (systemd, Kubernetes) starts it again as a standby.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from curvine_py.core.errors import CurvineError, NotLeader, Unavailable
from curvine_py.master.follower import LeaderHint

log = logging.getLogger(__name__)

EXIT_LOST_LEADERSHIP = 3
RETRY_S = 0.5    # a standby tries the lock this often (a connect, one query): the takeover waits at most this

T = TypeVar("T")


def wait_for_leadership(open_leading: Callable[[], T], hint: LeaderHint, stop: threading.Event, *,
                        retry_s: float = RETRY_S, on_standby: Callable[[], None] = lambda: None) -> T | None:
    """`open_leading()` (the engine opened as leader) once it stops raising NotLeader; None when
    `stop` is set first. Once it has stood by, a database that cannot be reached is retried the same
    way (logged once per change of reason); at the first try, and for any other error, the error is
    raised (a wrong URL or password, a schema of another version: the master stops with it).
    `on_standby` runs once, after the first refusal (the hint then names the leader)."""
    last_reason = ""
    announced = False
    while not stop.is_set():
        try:
            return open_leading()
        except NotLeader as exc:
            hint.set(exc.leader)
            reason = f"standing by: {exc.leader or 'an unknown master'} leads"
        except Unavailable as exc:
            if not announced:   # never reached at start: a wrong URL or password, say so and stop
                raise
            reason = f"standing by: {exc.message}"
        except CurvineError:
            raise
        if not announced:
            on_standby()
            announced = True
        if reason != last_reason:
            log.info("%s; trying again every %g s", reason, retry_s)
            last_reason = reason
        stop.wait(retry_s)
    return None
