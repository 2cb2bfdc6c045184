"""Access times of files read through this mount (`-o relatime` (default), `strictatime`,
`noatime`; the rule is core.posix.atime_due).

Why batched: an atime update is a master write; one per read would make every read a metadata
transaction. A read only notes the new atime here (shown at once in this mount's attributes);
`run()` sends the noted ones every BATCH_S, at most one SetAttr per inode per batch, and the
shutdown sends what is left. An update is best effort: one that fails is dropped (logged).

The ctime: the master moves ctime on every SetAttr unless told a value, so each update carries
the newest ctime this mount knows (the read's, or a later local commit's or change's). A change
made on another node between that and the batch (under BATCH_S) would get its ctime put back to
the older value; docs/fuse.md lists this.

Reads answered from the kernel's page cache never reach the mount. So an open keeps the cache
(fuse/pagecache.py) only when `due` says a read now would not move the atime: with relatime the
first read after a change (or a day) still reaches the mount; with strictatime every open drops.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio

from curvine_py.core.domain import Attr
from curvine_py.core.errors import CurvineError, NotFound
from curvine_py.core.posix import ATIME_MODES, SetAttrChanges, atime_due
from curvine_py.fuse.context import MountContext

log = logging.getLogger(__name__)

BATCH_S = 1.0


class AtimeUpdates:
    def __init__(self, ctx: MountContext, mode: str = "relatime", *, batch_s: float = BATCH_S,
                 clock_ns: Callable[[], int] = time.time_ns) -> None:
        if mode not in ATIME_MODES:
            raise ValueError(f"atime mode {mode!r}")
        self.ctx = ctx
        self.mode = mode
        self.batch_s = batch_s
        self._clock_ns = clock_ns
        self._pending: dict[int, tuple[int, int]] = {}    # ino -> (atime to set, ctime the read saw)
        self._scope: trio.CancelScope | None = None
        self._stopped = False

    def read(self, attr: Attr) -> None:
        """A read of the file whose latest known attributes are `attr` just reached the mount."""
        if self.mode == "noatime":
            return
        now = self._clock_ns()
        noted = self._pending.get(attr.ino)
        atime = noted[0] if noted is not None else attr.atime_ns
        if atime_due(self.mode, atime, attr.mtime_ns, attr.ctime_ns, now):
            self._pending[attr.ino] = (now, attr.ctime_ns)

    def due(self, attr: Attr) -> bool:
        """Would a read of the file now move its atime (so it must reach the mount)?"""
        if self.mode == "noatime":
            return False
        noted = self._pending.get(attr.ino)
        atime = noted[0] if noted is not None else attr.atime_ns
        return atime_due(self.mode, atime, attr.mtime_ns, attr.ctime_ns, self._clock_ns())

    def shown(self, ino: int) -> int | None:
        """The atime to show for `ino` while its update waits for the batch."""
        noted = self._pending.get(ino)
        return noted[0] if noted is not None else None

    async def flush(self) -> None:
        batch, self._pending = self._pending, {}
        for ino, (atime, ctime) in batch.items():
            changes = SetAttrChanges(atime_ns=atime, ctime_ns=max(ctime, self._latest_ctime(ino)))
            try:
                attr: Attr = await self.ctx.call(self.ctx.master.setattr, ino, changes)
            except NotFound:
                continue             # removed meanwhile: nothing to update
            except CurvineError as exc:
                log.debug("atime update of inode %d dropped: %s", ino, exc)
                continue
            self.ctx.attrs.drop(ino)
            self.ctx.note(attr)

    def _latest_ctime(self, ino: int) -> int:
        """The newest ctime this mount knows for `ino` (a commit or chmod here after the read
        moved it): an atime update must never set it back."""
        cached = self.ctx.attrs.get(ino)
        opened = self.ctx.handles.open_files.get(ino)
        return max(cached.ctime_ns if cached is not None else 0,
                   opened.file.attr.ctime_ns if opened is not None else 0)

    async def run(self) -> None:
        with trio.CancelScope() as scope:
            self._scope = scope
            if self._stopped or self.mode == "noatime":
                return
            while True:
                await trio.sleep(self.batch_s)
                if self._pending:
                    await self.flush()

    def stop(self) -> None:
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()
