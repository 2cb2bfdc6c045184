"""observe/fusemetrics.py: FUSE handlers of a pyfuse3.Operations instance counted by op, timed, their
failures counted by errno name; lookups counted as mount hits and misses, reads and writes as bytes.
Runs the handlers under trio without a kernel mount (pyfuse3's own Operations base class answers
ENOSYS, as it does for a real mount)."""
from __future__ import annotations

import errno
from typing import Any, cast

import pyfuse3
import pytest
import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from curvine_py.observe import metrics as m
from curvine_py.observe.fusemetrics import FUSE_OPS, instrument


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


class Ops(pyfuse3.Operations):
    """A few handlers as the mount answers them: an entry, ENOENT, a negative entry, data."""

    async def lookup(self, parent_inode: int, name: bytes, ctx: Any) -> pyfuse3.EntryAttributes:
        entry = pyfuse3.EntryAttributes()
        if name == b"missing":
            raise pyfuse3.FUSEError(errno.ENOENT)
        entry.st_ino = 0 if name == b"negative" else 42
        return entry

    async def read(self, fh: int, off: int, size: int) -> bytes:
        return b"x" * size

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        return len(buf)

    async def unlink(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        raise pyfuse3.FUSEError(errno.EACCES)


def test_requests_hits_bytes_and_errors_are_counted() -> None:
    registry = CollectorRegistry()
    ops = Ops()
    assert instrument(ops, m.register_mount(registry)) == len(FUSE_OPS)

    async def traffic() -> None:
        assert (await ops.lookup(1, b"chunk", None)).st_ino == 42
        with pytest.raises(pyfuse3.FUSEError):
            await ops.lookup(1, b"missing", None)
        await ops.lookup(1, b"negative", None)
        assert len(await ops.read(7, 0, 4096)) == 4096
        assert await ops.write(7, 0, b"y" * 100) == 100
        with pytest.raises(pyfuse3.FUSEError):
            await ops.unlink(1, b"x", None)
        with pytest.raises(pyfuse3.FUSEError):      # pyfuse3's default handler: ENOSYS
            await ops.mkdir(1, b"d", 0o755, cast(pyfuse3.RequestContext, None))

    trio.run(traffic)
    s = samples(registry)
    assert s[("curvine_mount_requests_total", (("op", "lookup"),))] == 3
    assert s[("curvine_mount_requests_total", (("op", "read"),))] == 1
    assert s[("curvine_mount_request_duration_seconds_count", (("op", "unlink"),))] == 1
    assert s[("curvine_cache_hits_total", (("way", "mount"),))] == 1
    assert s[("curvine_cache_misses_total", (("way", "mount"),))] == 2     # ENOENT and a negative entry
    assert s[("curvine_sent_bytes_total", (("way", "mount"),))] == 4096
    assert s[("curvine_received_bytes_total", (("way", "mount"),))] == 100
    assert s[("curvine_errors_total", (("code", "EACCES"),))] == 1
    assert s[("curvine_errors_total", (("code", "ENOSYS"),))] == 1
    assert ("curvine_errors_total", (("code", "ENOENT"),)) not in s     # a miss is not an error


def test_instrumenting_twice_is_refused() -> None:
    ops = Ops()
    metrics = m.register_mount(CollectorRegistry())
    instrument(ops, metrics)
    with pytest.raises(ValueError, match="already instrumented"):
        instrument(ops, metrics)


def test_error_codes_of_each_kind() -> None:
    from curvine_py.core.errors import NoSpace
    assert m.error_code(NoSpace("full")) == "ENOSPC"
    assert m.error_code(pyfuse3.FUSEError(errno.EIO)) == "EIO"
    assert m.error_code(FileNotFoundError(errno.ENOENT, "x")) == "ENOENT"
    assert m.error_code(OSError("no errno")) == "internal"
    assert m.error_code(KeyError("bug")) == "internal"
