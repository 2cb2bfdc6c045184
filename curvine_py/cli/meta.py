"""`curvine-py meta dump|load`: a master's namespace to a file and back (backups, and moving a
namespace between metadata engines).

    curvine-py meta dump [--data-dir DIR | --meta URL] FILE     (FILE '-': stdout)
    curvine-py meta load [--data-dir DIR | --meta URL] [--force] FILE     (FILE '-': stdin)

dump reads the database directly (no master needed; one read transaction, so it is consistent even
beside a running master). load takes the master's locks (so no master may run on the target),
refuses a target that already holds a namespace unless --force, and is one transaction: a file
that is damaged, truncated or of another schema loads nothing. The format is in
master/engine/dumpfile.py. A progress bar is drawn on stderr when it is a terminal.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import IO

from curvine_py import config
from curvine_py.cli.common import run_tool
from curvine_py.cli.progress import progress_bar
from curvine_py.core.errors import InvalidArgument, NotFound
from curvine_py.master.engine import open as engine
from curvine_py.master.engine import transfer
from curvine_py.master.engine.dumpfile import DumpReader
from curvine_py.master.engine.url import SQLITE, MetaURL, parse_meta_url


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py meta", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", required=True)
    for name, help_ in (("dump", "write the namespace to FILE"), ("load", "replace the namespace with FILE's")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("--data-dir", help="the master's data dir (its SQLite database DATA_DIR/meta.db)")
        s.add_argument("--meta", help="metadata engine URL (sqlite:///PATH or postgresql://...) instead")
        s.add_argument("--meta-password-file", help="file holding the PostgreSQL password")
        if name == "load":
            s.add_argument("--force", action="store_true", help="replace a namespace the target already holds")
        s.add_argument("file", metavar="FILE", help="the dump file ('-': stdout for dump, stdin for load)")
    return p


def target_of(args: argparse.Namespace) -> MetaURL:
    if args.meta:
        config.warn_password_in_url_flag(args.meta)
        url = parse_meta_url(args.meta, password_file=args.meta_password_file or "")
    elif args.data_dir:
        url = engine.default_url(os.path.abspath(args.data_dir))
    else:
        raise InvalidArgument("name the store: --data-dir DIR (the master's) or --meta URL")
    engine.require_supported(url)
    return url


def summary(verb: str, moved: transfer.Moved, url: MetaURL, file: str) -> None:
    tables = ", ".join(f"{table} {rows}" for table, rows in moved.tables if rows)
    print(f"{verb} {moved.rows} rows (schema version {moved.schema_version}; {tables}) "
          f"{'from' if verb == 'dumped' else 'into'} {url.masked()} {'to' if verb == 'dumped' else 'from'} "
          f"{file}", file=sys.stderr)


def do_dump(args: argparse.Namespace) -> int:
    url = target_of(args)
    if url.engine == SQLITE and not os.path.isfile(url.path):
        raise NotFound(f"no metadata database at {url.path}")
    ns = engine.open_reader(url)
    try:
        with ns.snapshot():
            total = transfer.count_rows(ns)
            with _output(args.file) as out, progress_bar("dump", total, unit="count", transient=True) as bar:
                moved = transfer.dump(ns, out, bar.advance)
    finally:
        ns.close()
    summary("dumped", moved, url, args.file)
    return 0


@contextlib.contextmanager
def _output(file: str) -> Iterator[IO[bytes]]:
    """stdout, or FILE written whole: into FILE.tmp, fsync'd, then renamed (never half a dump)."""
    if file == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    tmp = f"{file}.tmp"
    try:
        with open(tmp, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, file)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def do_load(args: argparse.Namespace) -> int:
    url = target_of(args)
    data_dir = os.path.abspath(args.data_dir) if args.data_dir else ""
    if data_dir:
        os.makedirs(data_dir, exist_ok=True)
    created = url.engine == SQLITE and not os.path.exists(url.path)
    lock_file = os.path.join(data_dir, engine.LOCK_FILE) if data_dir else ""
    new_lock = bool(lock_file) and not os.path.exists(lock_file)
    try:
        with _input(args.file) as source, engine.exclusive(url, data_dir):
            reader = DumpReader(source, args.file)
            ns = engine.open_namespace(url)
            try:
                with progress_bar("load", reader.header.rows, unit="count", transient=True) as bar:
                    moved = transfer.load(ns, reader, force=args.force, advance=bar.advance, target=url.masked())
            finally:
                ns.close()
    except BaseException:
        if created:   # a store this load created and could not fill: leave nothing behind
            for suffix in ("", "-wal", "-shm", ".lock"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(url.path + suffix)
        if new_lock:  # nor the data dir's lock file this load made (the lock itself is released)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock_file)
        raise
    summary("loaded", moved, url, args.file)
    return 0


@contextlib.contextmanager
def _input(file: str) -> Iterator[IO[bytes]]:
    if file == "-":
        yield sys.stdin.buffer
        return
    if not os.path.isfile(file):
        raise NotFound(f"no dump file {file}")
    with open(file, "rb") as fh:
        yield fh


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return run_tool("meta", lambda: do_dump(args) if args.action == "dump" else do_load(args))
