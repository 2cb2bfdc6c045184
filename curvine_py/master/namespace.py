"""The master's durable state: namespace, file blocks, block locations, pending deletions, workers.

One SQLite database in WAL mode with `synchronous=FULL` (or a PostgreSQL database: `engine=`, see
store/pgengine.py): a mutation is one transaction, and its reply is sent only after the commit
returned (the commit fsyncs the WAL). Every method here is the
plain-Python semantics of one Master RPC; the gRPC service only converts.

Concurrency rule: a `Namespace` is used by one thread at a time (the master's store thread; unit
tests call it directly). Methods are not re-entrant across threads.

Transactions: a mutation runs `with self.transaction():`, which is BEGIN IMMEDIATE .. COMMIT, or a
SAVEPOINT inside an open transaction: inside `batch()` (group commit, see storethread.py) a failing
operation rolls back only itself and the whole batch is made durable by one COMMIT before any reply.

Ids: inode numbers come from an AUTOINCREMENT key (never reused, so the generation stays 0), block
ids from a counter in `meta`. Both fit SQLite's signed 64-bit integers; uint64 values from the wire
above 2**63-1 are treated as unknown.
"""
from __future__ import annotations

from curvine_py.master.store.blocks import Blocks
from curvine_py.master.store.bulk import Bulk
from curvine_py.master.store.db import MAX_ID
from curvine_py.master.store.fsck import Checks
from curvine_py.master.store.names import READDIR_DEFAULT_LIMIT, READDIR_MAX_LIMIT, Names
from curvine_py.master.store.policy import MAX_BLOCK_SIZE, MAX_REPLICAS, MIN_BLOCK_SIZE
from curvine_py.master.store.replication import Replication
from curvine_py.master.store.reports import REPORT_GRACE_MS, BlockReports
from curvine_py.master.store.schema import SCHEMA_VERSION
from curvine_py.master.store.workers import WorkerRows
from curvine_py.master.store.xattrs import XATTR_NAME_MAX, XATTR_VALUE_MAX, Xattrs
from curvine_py.master.types import ROOT_INO

__all__ = ["MAX_BLOCK_SIZE", "MAX_ID", "MAX_REPLICAS", "MIN_BLOCK_SIZE", "READDIR_DEFAULT_LIMIT",
           "READDIR_MAX_LIMIT", "REPORT_GRACE_MS", "ROOT_INO", "SCHEMA_VERSION", "XATTR_NAME_MAX",
           "XATTR_VALUE_MAX", "Namespace"]


class Namespace(Names, Xattrs, Blocks, BlockReports, Replication, WorkerRows, Checks, Bulk):
    """The durable store. Open with a path to the SQLite file (created, with the root, if new)."""

    def reader(self) -> Namespace:
        """A read-only view of the same database on its own connection, for serving lookups
        without queueing behind the store thread's writes and fsyncs. It sees only committed state,
        which is exactly what has been acknowledged (group commit replies after COMMIT). Use one
        reader per thread, and its `snapshot()` around reads of several statements."""
        return Namespace(self.path, block_size=self.block_size, root_class=self.root_class,
                         durable_replicas=self.durable_replicas, clock_ns=self._clock_ns, read_only=True,
                         engine=self.engine)
