"""`curvine-py mount --master HOST:PORT MOUNTPOINT [...]`: the composition root of a mount process.

One trio run, one nursery: the pyfuse3 session, the signal watcher and the announcer (which waits
until the kernel mount answers, tunes it, and prints the ready line `mounted=MOUNTPOINT`). SIGTERM,
SIGINT and `fusermount3 -u` end it cleanly: the session stops, open files are committed (best
effort, within the deadline), the mount is removed if it is still there, exit code 0.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys

import pyfuse3
import trio

from curvine_py.client import CurvineClient
from curvine_py.config import ClientConfig, load
from curvine_py.core.cluster import MountInfo
from curvine_py.core.domain import FileType
from curvine_py.core.errors import CurvineError, NotADirectory, errno_name
from curvine_py.fuse import mountpoint
from curvine_py.fuse.attrs import Timeouts
from curvine_py.fuse.dataplane import TrioBlockReader
from curvine_py.fuse.filesystem import Filesystem
from curvine_py.fuse.offload import Offload
from curvine_py.fuse.operations import Operations
from curvine_py.fuse.options import MountOptions, parse
from curvine_py.observe.logs import setup_logging
from curvine_py.observe.roles import mount_metrics, ready_field, start_exporter

log = logging.getLogger(__name__)


def client_for(options: MountOptions) -> CurvineClient:
    """Per-call timeouts sit below the mount's deadline, so a thread abandoned at the deadline
    ends soon after instead of lingering."""
    config = load(ClientConfig, section="client", toml_path=options.config, flags={
        "master": options.master, "token": options.token or None, "node": options.node or None,
        "rpc_timeout_s": min(5.0, options.deadline_s * 0.5),
        "data_timeout_s": max(0.5, options.deadline_s * 0.8),
        # as many pooled connections per worker as data calls may run at once: a request that
        # finds the pool empty would open (and later close) a connection of its own
        "connections_per_worker": options.data_threads,
    })
    return CurvineClient(config=config)


def resolve_root(client: CurvineClient, subdir: str) -> int:
    attr = client.master.resolve(subdir)
    if attr.type != FileType.DIRECTORY:
        raise NotADirectory(f"--subdir {subdir} is not a directory")
    return int(attr.ino)


async def serve(options: MountOptions, client: CurvineClient, root: int) -> None:
    offload = Offload(deadline_s=options.deadline_s, data_threads=options.data_threads)
    reader = None
    if options.trio_reads:
        reader = TrioBlockReader(token=client.config.token, timeout_s=client.config.data_timeout_s,
                                 max_payload=client.config.max_payload, per_worker=options.data_threads,
                                 is_local=client.io.is_local)
    fs = Filesystem(client, offload, root=root, node=client.node, read_only=options.read_only,
                    attr_ttl=options.attr_timeout,
                    names_ttl=min(options.entry_timeout, options.attr_timeout), reader=reader,
                    read_ahead=options.read_ahead, atime=options.atime, fetch_ahead=options.fetch_ahead,
                    fetch_budget=options.fetch_budget, fetch_threads=options.fetch_threads,
                    fetch_local=options.fetch_local,
                    cache_versions=options.validate_cache and not options.direct_io)
    ops = Operations(fs, Timeouts(options.attr_timeout, options.entry_timeout, options.negative_timeout),
                     writeback_cache=options.writeback_cache, direct_io=options.direct_io,
                     keep_cache=options.keep_cache)
    metrics = mount_metrics(ops)     # before init: pyfuse3 takes the handlers from the instance
    pyfuse3.init(ops, options.mountpoint, options.libfuse_options())
    exporters = contextlib.ExitStack()
    try:
        metrics_port = start_exporter(exporters, options.metrics_host, options.metrics_port, metrics.registry)
        fields = ready_field("metrics", options.metrics_host, metrics_port)
        # told to the master with every session heartbeat: `report` lists where to scrape this mount
        fs.session.mount_info = MountInfo(node=client.node, mountpoint=options.mountpoint,
                                          metrics_port=metrics_port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal)
            nursery.start_soon(_announce, options, fields)
            nursery.start_soon(fs.session.run)
            nursery.start_soon(fs.atime.run)
            if fs.files.runs is not None:
                await nursery.start(fs.files.runs.start)    # background fetches (fuse/prefetch.py)
            # Idle request tasks stay parked (pyfuse3 ends a task that finds more than min_tasks
            # waiting and starts one when none is): with a few reads always in flight, min_tasks=2
            # ended and started a task for about every second 1 MiB read of a cold read.
            await pyfuse3.main(min_tasks=options.max_tasks, max_tasks=options.max_tasks)
            fs.session.stop()
            fs.atime.stop()
            nursery.cancel_scope.cancel()
    finally:
        with trio.move_on_after(options.deadline_s) as scope:
            scope.shield = True
            await fs.files.commit_all()
            await fs.atime.flush()
        still_mounted = mountpoint.is_mounted(options.mountpoint)
        pyfuse3.close(unmount=still_mounted)
        if fs.files.fetch is not None:
            fs.files.fetch.close()      # the receiver's pooled connections (the nursery ended every run)
        exporters.close()
        log.info("unmounted %s", options.mountpoint)


async def _stop_on_signal() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("%s: stopping", signal.Signals(signum).name)
            pyfuse3.terminate()
            return


async def _announce(options: MountOptions, fields: str = "") -> None:
    # stat() returns once the kernel finished INIT with us and got the root's attributes.
    await trio.to_thread.run_sync(os.stat, options.mountpoint, abandon_on_cancel=True)
    await trio.to_thread.run_sync(lambda: mountpoint.tune(
        options.mountpoint, read_ahead_kb=options.read_ahead_kb, max_background=options.max_background))
    log.info("mounted %s on %s (subdir %s)", options.master, options.mountpoint, options.subdir)
    print(f"mounted={options.mountpoint}{fields}", flush=True)


def main(argv: list[str]) -> int:
    try:
        options = parse(argv)
    except CurvineError as exc:
        print(f"curvine-py mount: {exc.message}", file=sys.stderr)
        return 2
    # pyfuse3 copies each 1 MiB reply into the kernel holding the GIL; threads receiving from
    # workers reacquire it after every recv. With the default 5 ms switch interval they queue
    # behind it (the convoy effect): a short interval keeps data threads flowing.
    sys.setswitchinterval(options.switch_interval)
    node = options.node or socket.gethostname()
    setup_logging("mount", node, options.log_level, options.log_format)
    client: CurvineClient | None = None
    try:
        mountpoint.prepare(options.mountpoint, force=options.force)
        client = client_for(options)
        root = resolve_root(client, options.subdir)
        trio.run(serve, options, client, root)
        return 0
    except CurvineError as exc:
        print(f"curvine-py mount: {exc.message} ({errno_name(exc.errno)})", file=sys.stderr)
        return 1
    except RuntimeError as exc:    # pyfuse3.init: fuse_session_new/mount failed
        print(f"curvine-py mount: {exc}", file=sys.stderr)
        return 1
    finally:
        if client is not None:
            client.close()
