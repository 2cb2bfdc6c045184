"""Opening the metadata engine a `MetaURL` names, and the locks that keep a second writer (another
master, a `meta load`) off the same database.

SQLite is the one engine that runs today. A postgresql:// URL is parsed and validated but answers
NotSupported here: the PostgreSQL engine is not built yet (docs/metadata.md says what is left).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from typing import Any

from curvine_py.core.errors import CurvineError, NotSupported
from curvine_py.master.engine.url import SQLITE, MetaURL, sqlite_url
from curvine_py.master.namespace import Namespace

DB_FILE = "meta.db"
LOCK_FILE = "master.lock"

POSTGRESQL_NOT_SUPPORTED = ("the PostgreSQL metadata engine is not available yet (issue 12): "
                            "run the master on SQLite (the default, or --meta sqlite:///PATH)")


def default_url(data_dir: str) -> MetaURL:
    """The embedded default: DATA_DIR/meta.db."""
    return sqlite_url(os.path.join(data_dir, DB_FILE))


def require_supported(url: MetaURL) -> None:
    """Raises NotSupported for an engine this build cannot run (checked before anything starts)."""
    if url.engine != SQLITE:
        raise NotSupported(f"{url.masked()}: {POSTGRESQL_NOT_SUPPORTED}")


def open_namespace(url: MetaURL, **options: Any) -> Namespace:
    """The store on the engine `url` names (Namespace's keyword options pass through)."""
    require_supported(url)
    os.makedirs(os.path.dirname(url.path), exist_ok=True)
    return Namespace(url.path, **options)


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
