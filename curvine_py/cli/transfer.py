"""Copying trees between the local disk and the cluster, for `load` and `fs put -r`/`get -r`:
walking a tree into a plan (directories, files, what is skipped and why), running the file copies
on a pool of threads, the progress bar of a tree (bytes and files, on a terminal only) and the
summary.

What a tree copy takes: directories and regular files. Symlinks are not followed and not copied
(a link out of the tree would copy what it points at, possibly the whole disk; a link inside it
would copy the same bytes twice), and fifos, sockets and devices have no bytes to copy: each is
skipped with a note naming it, and counted in the summary. Names are checked on the way in: a
name the namespace cannot hold (not UTF-8, too long) fails that entry, and a remote name that is
not one plain path component ('..', '/', NUL) never becomes a local path.

Error handling: one file's failure never stops the others; each failure is kept with its path and
message, and the caller exits non-zero naming them all. The copy itself (client/fs.py put/get)
writes under a temporary name renamed into place, so a failed file is never seen half-written.
"""
from __future__ import annotations

import contextlib
import os
import posixpath
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from curvine_py.cli.common import human_bytes
from curvine_py.cli.progress import Bar, progress_bar
from curvine_py.client import CurvineClient
from curvine_py.core.errors import CurvineError, InvalidArgument, errno_name
from curvine_py.core.keys import validate_name

# Copies in flight by default: each is mostly waiting on a socket or a disk, so twice the cores,
# bounded so a big machine does not open dozens of connections per worker.
MAX_DEFAULT_JOBS = 8


def default_jobs() -> int:
    return max(2, min(MAX_DEFAULT_JOBS, 2 * (os.cpu_count() or 1)))


@dataclass(frozen=True, slots=True)
class FileCopy:
    """One regular file of a plan: `rel` is its path below the tree's root, '/'-separated."""
    rel: str
    source: str
    target: str
    size: int


@dataclass(slots=True)
class Plan:
    dirs: list[str] = field(default_factory=list)            # targets to create, parents first
    files: list[FileCopy] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (rel, why)
    failed: list[tuple[str, str]] = field(default_factory=list)    # (rel, error) found while walking

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def directories_failed(self, failed: list[tuple[str, str]], root: str, sep: str) -> None:
        """Directories (targets) that could not be made, with why: each is a failure, and so is
        every file below one (it is not even tried: a local path there may lead out of the tree)."""
        for path, error in failed:
            rel = path[len(root):].lstrip(sep).replace(sep, "/") or "."
            self.failed.append((rel + "/", error))
            below = [f for f in self.files if f.target.startswith(path.rstrip(sep) + sep)]
            self.files = [f for f in self.files if f not in below]
            self.failed += [(f.rel, f"not copied: directory {rel} could not be made") for f in below]


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink (not followed)"), (stat.S_ISFIFO, "a fifo"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _namespace_name(name: str) -> str | None:
    """Why `name` cannot be a name in the namespace, or None when it can."""
    try:
        name.encode("utf-8")
        validate_name(name)
    except UnicodeEncodeError:
        return "the name is not valid UTF-8"
    except CurvineError as exc:
        return exc.message
    return None


def local_plan(source: str, target: str) -> Plan:
    """The plan of copying local `source` (a directory: its contents; a file: itself) to cluster
    directory `target`. `source` itself may be a symlink (the one the user named is followed);
    below it, symlinks are not followed. Parents before children, sorted."""
    plan = Plan(dirs=[target])
    info = os.stat(source)
    if not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode):
        raise InvalidArgument(f"{source} is {_kind(info.st_mode)}: give a directory or a regular file")
    if stat.S_ISREG(info.st_mode):
        name = os.path.basename(source)
        problem = _namespace_name(name)
        if problem:
            plan.failed.append((name, problem))
        else:
            plan.files.append(FileCopy(name, source, posixpath.join(target, name), info.st_size))
        return plan

    def walk(directory: str, rel: str, remote: str) -> None:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            plan.failed.append((rel or ".", f"cannot list: {exc.strerror}"))
            return
        for entry in entries:
            child_rel = f"{rel}/{entry.name}" if rel else entry.name
            problem = _namespace_name(entry.name)
            if problem:
                plan.failed.append((child_rel, problem))
                continue
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError as exc:
                plan.failed.append((child_rel, f"cannot stat: {exc.strerror}"))
                continue
            child_remote = posixpath.join(remote, entry.name)
            if stat.S_ISDIR(mode):
                plan.dirs.append(child_remote)
                walk(entry.path, child_rel, child_remote)
            elif stat.S_ISREG(mode):
                plan.files.append(FileCopy(child_rel, entry.path, child_remote, entry.stat(follow_symlinks=False).st_size))
            else:
                plan.skipped.append((child_rel, _kind(mode)))

    walk(source, "", target)
    return plan


def remote_plan(client: CurvineClient, source: str, target: str) -> Plan:
    """The plan of copying cluster directory `source`'s contents to local directory `target`.
    Every remote name is checked to be one plain component before it is joined to a local path."""
    plan = Plan(dirs=[target])

    def walk(directory: str, rel: str, local: str) -> None:
        for entry in sorted(client.fs.ls(directory), key=lambda e: e.path):
            name = posixpath.basename(entry.path)
            child_rel = f"{rel}/{name}" if rel else name
            problem = _namespace_name(name)
            if problem:   # a name no local path may be made of
                plan.failed.append((child_rel, f"refused: {problem}"))
                continue
            child_local = os.path.join(local, name)
            if entry.is_dir:
                plan.dirs.append(child_local)
                walk(entry.path, child_rel, child_local)
            elif entry.kind == "file":
                plan.files.append(FileCopy(child_rel, entry.path, child_local, entry.size))
            else:
                plan.skipped.append((child_rel, f"a {entry.kind}" + (" (not followed)" if entry.kind == "symlink" else "")))

    walk(source, "", target)
    return plan


@dataclass(slots=True)
class Outcome:
    """What a tree copy did, per file (rel paths); the summary and --json are made from it."""
    copied: list[str] = field(default_factory=list)
    copied_bytes: int = 0
    unchanged: list[str] = field(default_factory=list)
    unchanged_bytes: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self, verb: str, unchanged: bool = True) -> str:
        """One line: `{verb} N files (size), M unchanged (size), F failed, S skipped in T s`."""
        kept = f", {len(self.unchanged)} unchanged ({human_bytes(self.unchanged_bytes)})" if unchanged else ""
        return (f"{verb} {len(self.copied)} files ({human_bytes(self.copied_bytes)}){kept}"
                f", {len(self.failed)} failed, {len(self.skipped)} skipped in {self.seconds:.1f} s")

    def as_dict(self) -> dict[str, object]:
        return {"copied": len(self.copied), "copied_bytes": self.copied_bytes,
                "unchanged": len(self.unchanged), "unchanged_bytes": self.unchanged_bytes,
                "failed": [{"path": p, "error": e} for p, e in self.failed],
                "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
                "copied_files": self.copied, "seconds": round(self.seconds, 3)}


class TreeProgress:
    """One bar of bytes for the whole tree, its description counting files done of all; drawn on
    stderr only when stderr is a terminal (in a pipe or a log: nothing until the summary)."""

    def __init__(self, verb: str, files: int, total_bytes: int) -> None:
        self._verb = verb
        self._files = files
        self._done = 0
        self._failed = 0
        self._lock = threading.Lock()
        self._bar = Bar()
        self._total = total_bytes

    def _description(self) -> str:
        failed = f", {self._failed} failed" if self._failed else ""
        return f"{self._verb} {self._done}/{self._files} files{failed}"

    @contextlib.contextmanager
    def shown(self) -> Iterator[TreeProgress]:
        with progress_bar(self._description(), self._total) as bar:
            self._bar = bar
            yield self

    def advance(self, n: int) -> None:
        self._bar.advance(n)

    def file_done(self, failed: bool = False) -> None:
        with self._lock:
            self._done += 1
            self._failed += failed
            description = self._description()
        self._bar.describe(description)


def error_text(exc: BaseException) -> str:
    if isinstance(exc, CurvineError):
        return f"{exc.message} ({errno_name(exc.errno)})"
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc} ({errno_name(exc.errno) if exc.errno else 'OSError'})"
    return f"{type(exc).__name__}: {exc}"


# copy(file, advance) -> True when it copied, False when the target already had those bytes.
Copier = Callable[[FileCopy, Callable[[int], None]], bool]


def run_copies(plan: Plan, copy: Copier, jobs: int, progress: TreeProgress) -> Outcome:
    """Runs `copy` for every file of `plan` on `jobs` threads; never raises for one file's failure
    (CurvineError or OSError: kept in the outcome). A file that fails after moving some bytes has
    them taken back off the bar, so the bar's total only ever counts what arrived."""
    outcome = Outcome(failed=list(plan.failed), skipped=list(plan.skipped))
    lock = threading.Lock()
    started = time.monotonic()

    def one(item: FileCopy) -> None:
        moved = [0]

        def advance(n: int) -> None:
            moved[0] += n
            progress.advance(n)

        try:
            copied = copy(item, advance)
        except (CurvineError, OSError) as exc:
            progress.advance(-moved[0])
            with lock:
                outcome.failed.append((item.rel, error_text(exc)))
            progress.file_done(failed=True)
            return
        if not moved[0]:
            progress.advance(item.size)   # an unchanged file counts as done
        with lock:
            if copied:
                outcome.copied.append(item.rel)
                outcome.copied_bytes += item.size
            else:
                outcome.unchanged.append(item.rel)
                outcome.unchanged_bytes += item.size
        progress.file_done()

    pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="copy")
    try:
        list(pool.map(one, plan.files))
    finally:
        # Ctrl-C: the copies not started are dropped; the ones in flight finish or fail (their
        # temporary names keep a cut-off file from ever being seen), then the interrupt goes on.
        pool.shutdown(wait=True, cancel_futures=True)
    outcome.copied.sort()
    outcome.unchanged.sort()
    outcome.failed.sort()
    outcome.seconds = time.monotonic() - started
    return outcome


def _below(path: str, failed: list[tuple[str, str]], sep: str) -> bool:
    """Whether `path` is inside a directory that could not be made (then it is not tried)."""
    return any(path.startswith(d.rstrip(sep) + sep) for d, _ in failed)


def make_remote_dirs(client: CurvineClient, dirs: list[str]) -> list[tuple[str, str]]:
    """Creates each directory (parents first) unless it is there; the ones that cannot be made,
    with why (their files then fail on their own, naming the same cause)."""
    failed: list[tuple[str, str]] = []
    for path in dirs:
        if _below(path, failed, "/"):
            continue
        try:
            client.fs.mkdir(path, parents=True)
        except CurvineError as exc:
            failed.append((path, error_text(exc)))
    return failed


def uploader(client: CurvineClient, force: bool) -> Copier:
    """Puts each file; unless `force`, one already there with the same bytes is left (False)."""
    def copy(item: FileCopy, advance: Callable[[int], None]) -> bool:
        if not force and client.fs.same_content(item.source, item.target):
            return False
        client.fs.put(item.source, item.target, progress=advance)
        return True
    return copy


def make_local_dirs(dirs: list[str]) -> list[tuple[str, str]]:
    """As make_remote_dirs on the local disk. A path that is there but is not a directory, or is a
    symlink (never written through: it may lead out of the tree), is a failure."""
    failed: list[tuple[str, str]] = []
    for path in dirs:
        if _below(path, failed, os.sep):
            continue
        try:
            os.mkdir(path)
        except FileExistsError:
            if os.path.islink(path) or not os.path.isdir(path):
                failed.append((path, "exists and is not a directory (a symlink is not followed)"))
        except OSError as exc:
            failed.append((path, error_text(exc)))
    return failed


def downloader(client: CurvineClient) -> Copier:
    def copy(item: FileCopy, advance: Callable[[int], None]) -> bool:
        client.fs.get(item.source, item.target, progress=advance)
        return True
    return copy


def report_problems(tool: str, outcome: Outcome) -> None:
    """Each skipped entry as a note and each failure as an error line, on stderr."""
    for rel, why in outcome.skipped:
        print(f"curvine-py {tool}: note: skipped {rel}: {why}", file=sys.stderr)
    for rel, error in outcome.failed:
        print(f"curvine-py {tool}: failed: {rel}: {error}", file=sys.stderr)
