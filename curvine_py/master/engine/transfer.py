"""Dump a store into a dump file and load one into a store (the logic of `curvine-py meta`).

dump: one read transaction over every table, so the file is one consistent state even while a
master keeps writing. load: one write transaction; the rows go in as the file is read and the
commit waits for the trailer's checksum, so a damaged or truncated file leaves the target as it was.
"""
from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from curvine_py.core.errors import AlreadyExists, InvalidArgument
from curvine_py.master.engine.dumpfile import DumpReader, DumpWriter, Header
from curvine_py.master.namespace import Namespace

log = logging.getLogger(__name__)

_BATCH = 2000                    # rows per executemany

Progress = Callable[[int], None]   # called with the number of rows just moved


@dataclass(frozen=True, slots=True)
class Moved:
    rows: int
    tables: tuple[tuple[str, int], ...]     # rows per table
    schema_version: int


def count_rows(ns: Namespace) -> int:
    """Rows a dump of `ns` will hold (call inside the same snapshot as dump)."""
    return sum(ns.table_size(table) for table, _ in ns.table_columns())


def dump(ns: Namespace, out: IO[bytes], advance: Progress = lambda _n: None) -> Moved:
    """Writes every table of `ns` to `out`. The caller holds `ns.snapshot()` around this and
    count_rows, so both see one state."""
    tables = ns.table_columns()
    sizes = {table: ns.table_size(table) for table, _ in tables}
    header = Header(ns.schema_version(), ns.next_ino(), sum(sizes.values()), tuple(tables))
    writer = DumpWriter(out, header)
    for index, (table, columns) in enumerate(tables):
        for row in ns.table_rows(table, columns):
            writer.row(index, row)
            advance(1)
    rows = writer.close()
    return Moved(rows, tuple(sizes.items()), header.schema_version)


_PROBLEMS_SHOWN = 5


def _refuse_unsound(ns: Namespace, target: str) -> None:
    """Raises (the transaction then loads nothing) when the loaded rows fail the namespace check."""
    problems = ns.check()
    if problems:
        shown = "; ".join(problems[:_PROBLEMS_SHOWN])
        more = f" (and {len(problems) - _PROBLEMS_SHOWN} more)" if len(problems) > _PROBLEMS_SHOWN else ""
        raise InvalidArgument(f"the dump does not hold a sound namespace, {target} is left as it was: "
                              f"{shown}{more}")


def load(ns: Namespace, reader: DumpReader, *, force: bool = False, advance: Progress = lambda _n: None,
         target: str = "the target") -> Moved:
    """Replaces the content of `ns` with the dump's, in one transaction. Refuses (before changing
    anything) a dump of another schema version or other tables, and a target that holds anything
    beyond a new store's root unless `force`."""
    header = reader.header
    with ns.transaction():
        if header.schema_version != ns.schema_version():
            raise InvalidArgument(f"the dump is of schema version {header.schema_version}, {target} is at "
                                  f"{ns.schema_version()}: start a master of the dump's version on a copy "
                                  f"(it migrates at open) and dump again")
        want = dict(ns.table_columns())
        have = dict(header.tables)
        if set(want) != set(have) or any(set(want[t]) != set(have[t]) for t in want):
            raise InvalidArgument(f"the dump's tables do not match {target}'s schema "
                                  f"(dump: {sorted(have)}, target: {sorted(want)})")
        if not ns.is_blank():
            if not force:
                raise AlreadyExists(f"{target} already holds a namespace: load into a new one, or pass "
                                    f"--force to replace it")
            log.warning("%s: replacing its namespace with the dump's (--force)", target)
        ns.clear_all()
        counts: dict[str, int] = dict.fromkeys(have, 0)
        moved = 0
        grouped = itertools.groupby(reader.rows(), key=lambda item: (item[0], item[1]))
        for (table, columns), items in grouped:
            while batch := [values for _t, _c, values in itertools.islice(items, _BATCH)]:
                ns.insert_rows(table, columns, batch)
                counts[table] += len(batch)
                moved += len(batch)
                advance(len(batch))
        # reader.rows() returned: the trailer checked out. A checksum proves the file is whole, not
        # that whoever wrote it wrote a sound namespace: it must pass the namespace's own fsck first.
        ns.set_next_ino(header.next_ino)
        ns.loaded()
        _refuse_unsound(ns, target)
    ns.settled_after_load()
    return Moved(moved, tuple(counts.items()), header.schema_version)
