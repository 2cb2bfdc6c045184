"""The worker rows that membership persists (register, heartbeat, lease state).
"""
from __future__ import annotations

from curvine_py.master.store.db import MAX_ID, Database
from curvine_py.master.store.schema import _WORKER_COLS
from curvine_py.master.types import (
    WorkerInfo,
)

_WORKER_UPDATE = ", ".join(f"{c.strip()} = excluded.{c.strip()}" for c in _WORKER_COLS.split(",")[1:])


class WorkerRows(Database):
    """Load and save worker rows."""

    def load_workers(self) -> list[WorkerInfo]:
        return [WorkerInfo(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8],
                           bool(row[9]), row[10], row[11], row[12], row[13])
                for row in self._db.execute(f"SELECT {_WORKER_COLS} FROM workers ORDER BY worker_id")]

    def save_worker(self, w: WorkerInfo) -> None:
        """Call inside a transaction."""
        self._db.execute(
            f"INSERT INTO workers ({_WORKER_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            f"ON CONFLICT (worker_id) DO UPDATE SET {_WORKER_UPDATE}",
            (w.worker_id, w.host, w.port, w.unix_socket, w.node, min(w.capacity, MAX_ID), min(w.used, MAX_ID),
             min(w.available, MAX_ID), w.lm_port, int(w.live), w.last_heartbeat_ms, min(w.blocks, MAX_ID),
             min(w.objects, MAX_ID), min(w.evictions, MAX_ID)))
