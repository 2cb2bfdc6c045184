"""Opening the metadata engine a `MetaURL` names, and the locks that keep a second writer (another
master, a `meta load`) off the same database.

SQLite: one file, guarded by flocks. PostgreSQL: the database's own advisory lock, taken by the
writer session (store/pgengine.py): opening a database another master leads raises NotLeader with
that master's address.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from typing import Any

from curvine_py.core.errors import CurvineError
from curvine_py.master.engine.url import SQLITE, MetaURL, sqlite_url
from curvine_py.master.leaderlease import Lease
from curvine_py.master.namespace import Namespace

DB_FILE = "meta.db"
LOCK_FILE = "master.lock"


def default_url(data_dir: str) -> MetaURL:
    """The embedded default: DATA_DIR/meta.db."""
    return sqlite_url(os.path.join(data_dir, DB_FILE))


def require_supported(url: MetaURL) -> None:
    """Both engines run in this build (kept for the callers that check before anything starts)."""


def open_namespace(url: MetaURL, *, advertise: str = "", lease: Lease | None = None, **options: Any) -> Namespace:
    """The store on the engine `url` names, led by this process (Namespace's keyword options pass
    through). PostgreSQL: NotLeader when another master leads the database; `advertise` is the
    address written for the others to find (also later: Namespace.set_leader_address); `lease`: the
    master's leader lease (master/leaderlease.py; None for a `meta load`)."""
    if url.engine != SQLITE:
        from curvine_py.master.store.pgengine import open_engine
        ns: Namespace = open_engine(url, advertise=advertise, lease=lease, **options)
        return ns
    os.makedirs(os.path.dirname(url.path), exist_ok=True)
    return Namespace(url.path, **options)


def open_reader(url: MetaURL) -> Namespace:
    """A read-only store (meta dump): no lock, no leadership; use its snapshot() around the reads."""
    if url.engine != SQLITE:
        from curvine_py.master.store.pgengine import open_reader as open_pg_reader
        ns: Namespace = open_pg_reader(url)
        return ns
    return Namespace(url.path, read_only=True)


@contextlib.contextmanager
def exclusive(url: MetaURL, data_dir: str = "") -> Iterator[None]:
    """Holds the locks of one writer: DATA_DIR/master.lock (the master's address file lives there)
    and, for SQLite, DB.lock beside the database file, so a master started with --meta on another
    master's file is refused too. Two writers of one SQLite file would each believe they own it."""
    with contextlib.ExitStack() as stack:
        if data_dir:
            stack.enter_context(_flock(os.path.join(data_dir, LOCK_FILE), f"another master is running on {data_dir}"))
        if url.engine == SQLITE:
            os.makedirs(os.path.dirname(url.path), exist_ok=True)
            stack.enter_context(_flock(f"{url.path}.lock", f"another master (or meta load) is using {url.path}"))
        yield


@contextlib.contextmanager
def _flock(path: str, busy: str) -> Iterator[None]:
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CurvineError(busy) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        yield
