"""The mount's session with the master: directory leases asked for, given back and renewed
(the table and its promise: fuse/leases.py), and the renewal loop that is also the session's
heartbeat (master/sessions.py: a silent mount's kept orphans are released) and carries the
mount's description (node, mountpoint, /metrics port) for the master's report.

`SessionTask.run()` is started in the mount's nursery (fuse/main.py) and ends when `stop()` is
called or its scope is cancelled.
"""
from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TypeVar

import trio

from curvine_py.core.cluster import MountInfo
from curvine_py.core.domain import DirLease, LeaseRenewal
from curvine_py.core.errors import CurvineError
from curvine_py.fuse.context import MountContext

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_LEASE_TERM_S = 2.0   # until the master tells its own (renewals run every quarter term)
DEFAULT_HEARTBEAT_S = 1.0    # until the master tells its session timeout (a third of it)


class SessionTask:
    def __init__(self, ctx: MountContext) -> None:
        self.ctx = ctx
        self._lease_term_s = DEFAULT_LEASE_TERM_S
        self._heartbeat_s = DEFAULT_HEARTBEAT_S
        self._scope: trio.CancelScope | None = None
        self._stopped = False
        # Sent with every renewal so the master's report lists this mount (set by fuse/main.py).
        self.mount_info: MountInfo | None = None

    # -- directory leases (fuse/leases.py) -----------------------------------------------------
    async def acquire_lease(self, directory: int) -> None:
        leases = self.ctx.leases
        sent_at = leases.clock()
        try:
            reply: DirLease = await self.ctx.call(self.ctx.master.acquire_dir_lease, directory)
        except CurvineError as exc:
            log.debug("directory lease on %d: %s", directory, exc)
            leases.refused(directory)
            return
        if not reply.granted:
            leases.refused(directory)
            return
        self._lease_term_s = reply.term_ms / 1000
        if not leases.granted(directory, reply.names, self._lease_term_s, sent_at):
            await self.release_leases([directory])

    async def release_leases(self, directories: list[int]) -> None:
        try:
            await self.ctx.call(self.ctx.master.release_dir_leases, directories)
        except CurvineError as exc:    # they run out at the end of their term anyway
            log.debug("release of directory leases %s: %s", directories, exc)

    async def adding_name(self, directory: int, name: str, call: Awaitable[T]) -> T:
        """A control call that adds `name` to `directory`: the lease learns of it, or is dropped
        when the outcome is not known for sure."""
        try:
            result = await call
        except BaseException:
            self.ctx.leases.lost(directory)
            raise
        self.ctx.leases.added(directory, name)
        return result

    # -- the loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Renews this mount's directory leases every quarter term and gives back the lost ones;
        the same call is the session's heartbeat, sent at least every third of the master's
        session timeout."""
        with trio.CancelScope() as scope:
            self._scope = scope
            if self._stopped:
                return
            await self._loop()

    def stop(self) -> None:
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()

    async def _loop(self) -> None:
        leases = self.ctx.leases
        last_heartbeat = -1e9
        while True:
            await trio.sleep(self._lease_term_s / 4 if self._lease_term_s > 0 else self._heartbeat_s)
            directories = leases.held_directories()
            sent_at = leases.clock()
            if not directories and sent_at - last_heartbeat < self._heartbeat_s:
                continue
            try:
                reply: LeaseRenewal = await self.ctx.call(self.ctx.master.renew_dir_leases, directories,
                                                             self.mount_info)
            except CurvineError as exc:    # unused leases run out by themselves
                log.debug("renewal of directory leases: %s", exc)
                continue
            last_heartbeat = sent_at
            self._lease_term_s = reply.term_ms / 1000
            if reply.session_timeout_ms:
                self._heartbeat_s = reply.session_timeout_ms / 3000
            gone = leases.renewed(directories, reply.kept, self._lease_term_s, sent_at)
            if gone:
                await self.release_leases(gone)
