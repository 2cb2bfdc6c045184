"""`curvine-py worker`: the composition root of a storage worker.

Opens the store (locks the data dirs, rebuilds the inventory), starts the short-circuit unix socket,
the TCP data plane, the evictor and the heartbeat loop, and prints exactly one ready line
`worker=HOST:PORT id=WORKER_ID` once the data plane listens *and* the master accepted the
registration. SIGTERM/SIGINT stop everything in reverse order and exit 0. Teardown is registered
on one ExitStack, not scattered.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import signal
import socket
import sys
import threading
from types import FrameType

from curvine_py import config
from curvine_py.config import WorkerConfig
from curvine_py.core.errors import CurvineError, InvalidArgument
from curvine_py.observe.logs import add_log_format_flag, setup_logging
from curvine_py.observe.metrics import WorkerMetrics
from curvine_py.observe.roles import (
    add_metrics_flag,
    add_metrics_host_flag,
    ready_field,
    start_exporter,
    worker_metrics,
)
from curvine_py.rpc.tls import add_tls_options, server_context, tls_files
from curvine_py.worker.evictor import Evictor
from curvine_py.worker.heartbeat import Advertised, Heartbeater
from curvine_py.worker.limits import ConnectionGate, ServerLimits, raise_fd_limit
from curvine_py.worker.lmauth import LocalUsers, PeerFilter, check_lm_bind, parse_networks, parse_uids
from curvine_py.worker.refuser import Refuser
from curvine_py.worker.scrub import Scrubber
from curvine_py.worker.server import DataServer
from curvine_py.worker.shortcircuit import ShortCircuitServer, default_socket_path
from curvine_py.worker.store import Store
from curvine_py.worker.workerstate import WorkerState

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py worker", description="Run a storage worker on this node.")
    p.add_argument("--master", help="HOST:PORT of the master, or a comma list of several masters "
                                    "(the leader is found and followed); env CURVINE_MASTER")
    p.add_argument("--data-dir", dest="data_dirs", action="append", metavar="DIR[:CAPACITY]",
                   help="data directory, repeatable; CAPACITY like 100GiB (0 or absent = filesystem size)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="data-plane TCP port (0 = any free port)")
    p.add_argument("--node", help="node name (default: hostname)")
    p.add_argument("--token", help="shared-secret token (HELLO on the data plane, gRPC metadata)")
    config.add_token_file_option(p)
    add_tls_options(p)
    p.add_argument("--insecure", action="store_true", default=None,
                   help="allow listening on a non-loopback address without a token")
    p.add_argument("--config", help="TOML file with a [worker] section")
    p.add_argument("--max-payload", type=config.parse_size, help="largest accepted payload, e.g. 256MiB")
    p.add_argument("--max-key-bytes", type=int, help="longest accepted KV key in UTF-8 bytes")
    p.add_argument("--high-watermark", type=float, help="usage ratio that starts eviction (default 0.90)")
    p.add_argument("--low-watermark", type=float, help="usage ratio eviction goes down to (default 0.75)")
    p.add_argument("--free-space-ratio", type=float,
                   help="share of each data dir's file system always left free, whatever the capacity "
                   "(default 0.1); below it cache data is evicted and writes get ENOSPC")
    p.add_argument("--scrub-rate", type=config.parse_size,
                   help="re-read and verify stored data in the background at this many bytes/s, e.g. "
                   "20MiB (default 0 = off); a corrupt copy is dropped and reported")
    p.add_argument("--pin-grace-ms", type=int, help="how long an EXISTS pin keeps a hit readable")
    p.add_argument("--lm-port", type=int, help="LMCache lm:// server port (0 = off, -1 = any free port)")
    p.add_argument("--lm-host", help="address of the lm:// port (default 127.0.0.1: node-local; the "
                   "protocol has no credentials)")
    p.add_argument("--lm-insecure", action="store_true", default=None,
                   help="allow the lm:// port on a reachable address (anyone reaching it is trusted)")
    p.add_argument("--lm-allow", dest="lm_allow", action="append", metavar="CIDR",
                   help="only peers in this network may use the lm:// port (repeatable)")
    p.add_argument("--lm-allow-uid", dest="lm_allow_uid", action="append", metavar="UID",
                   help="a local user (uid) that may use the lm:// port over loopback besides the worker's own; "
                   "with a token only those may (repeatable)")
    p.add_argument("--unix-socket", help="short-circuit socket path (default DATA_DIR/worker.sock)")
    p.add_argument("--worker-id", help="override the id persisted in the first data dir")
    p.add_argument("--max-connections", type=int,
                   help="open connections over all ports (0 = auto: (fd limit - 128) / 2)")
    p.add_argument("--max-connections-per-peer", type=int,
                   help="open connections per peer address, unix socket: per process (0 = half the above)")
    p.add_argument("--idle-timeout-s", type=float,
                   help="close a data-plane connection silent this long (default 300; 0 = never)")
    p.add_argument("--header-timeout-s", type=float,
                   help="close a connection whose started frame header is not complete in time (default 10)")
    p.add_argument("--auth-timeout-s", type=float,
                   help="with a token: close a connection not authenticated in time (default 10)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    add_log_format_flag(p)
    add_metrics_flag(p)
    add_metrics_host_flag(p)
    return p


def load_config(args: argparse.Namespace) -> WorkerConfig:
    flags = {k: v for k, v in vars(args).items() if k not in ("config", "log_level", "log_format") and v is not None}
    for many in ("data_dirs", "lm_allow", "lm_allow_uid"):
        if many in flags:
            flags[many] = tuple(flags[many])
    cfg = config.load(WorkerConfig, section="worker", toml_path=args.config, flags=flags)
    if not cfg.data_dirs:
        raise InvalidArgument("at least one --data-dir is required")
    cfg = dataclasses.replace(cfg, master=",".join(config.parse_master_list(cfg.master)))
    if not 0 < cfg.low_watermark <= cfg.high_watermark <= 1:
        raise InvalidArgument(f"watermarks must satisfy 0 < low <= high <= 1, got {cfg.low_watermark}, "
                              f"{cfg.high_watermark}")
    if not 0 <= cfg.free_space_ratio < 1:
        raise InvalidArgument(f"--free-space-ratio must be in [0, 1), got {cfg.free_space_ratio}")
    if cfg.scrub_rate < 0:
        raise InvalidArgument("--scrub-rate must be >= 0 (0 = off)")
    if cfg.max_payload <= 0 or cfg.max_key_bytes <= 0:
        raise InvalidArgument("--max-payload and --max-key-bytes must be positive")
    if cfg.lm_port < -1:
        raise InvalidArgument("--lm-port must be a port, 0 (off) or -1 (any free port)")
    config.require_secure(cfg.host, cfg.token, cfg.insecure, "worker")
    tls_files(cfg).check("worker", server=True)
    server_limits(cfg)   # validates them
    if cfg.lm_port:
        check_lm_bind(cfg.lm_host, token=cfg.token, lm_insecure=cfg.lm_insecure, insecure=cfg.insecure)
        parse_networks(cfg.lm_allow)
        parse_uids(cfg.lm_allow_uid)
    return cfg


def server_limits(cfg: WorkerConfig) -> ServerLimits:
    return ServerLimits(max_connections=cfg.max_connections, max_per_peer=cfg.max_connections_per_peer,
                        idle_timeout_s=cfg.idle_timeout_s, header_timeout_s=cfg.header_timeout_s,
                        auth_timeout_s=cfg.auth_timeout_s, profile_dir=cfg.profile_dir)


def advertised_host(host: str) -> str:
    """The address other nodes use: the bind address, unless it is a wildcard."""
    if host not in ("", "0.0.0.0", "::"):
        return host
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return socket.gethostname()


def listen_host(host: str) -> str:
    """What a ready line shows of a listen address: a wildcard as the wildcard (every address, not
    the one address the host name resolves to)."""
    if host in ("", "0.0.0.0"):
        return "0.0.0.0"
    return "[::]" if host == "::" else host


def start_lm_server(cfg: WorkerConfig, node: str, teardown: contextlib.ExitStack, limits: ServerLimits,
                    gate: ConnectionGate, metrics: WorkerMetrics) -> int:
    """The LMCache `lm://` port: a KV client of this cluster (routing each key to its owner, this
    worker included, reached by short-circuit when local) behind LMCache's wire protocol."""
    from curvine_py.client import CurvineClient
    from curvine_py.worker.lmserver import LmServer

    client = CurvineClient(cfg.master, token=cfg.token, node=node, tls_cert=cfg.tls_cert, tls_key=cfg.tls_key,
                           tls_ca=cfg.tls_ca)
    teardown.callback(client.close)
    # No idle timeout on lm://: the stock LMCache client never reconnects (notes/lmcache.md), so a
    # closed idle connection would cost its engine the L2 tier until it restarts.
    server = LmServer(client.kv, host=cfg.lm_host, port=max(cfg.lm_port, 0), max_payload=cfg.max_payload,
                      limits=dataclasses.replace(limits, idle_timeout_s=0), gate=gate,
                      peers=PeerFilter(parse_networks(cfg.lm_allow)),
                      local_users=LocalUsers.for_cluster(token=cfg.token, allow_uids=cfg.lm_allow_uid),
                      metrics=metrics)
    port = server.start()
    teardown.callback(server.stop)
    return port


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    tag = setup_logging("worker", socket.gethostname(), args.log_level, args.log_format)
    try:
        cfg = load_config(args)
    except (CurvineError, OSError) as exc:
        print(f"curvine-py worker: {exc}", file=sys.stderr)
        return 2
    tag.node = cfg.node or tag.node

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        with contextlib.ExitStack() as teardown:
            store = Store([config.parse_data_dir(spec) for spec in cfg.data_dirs],
                          max_key_bytes=cfg.max_key_bytes, pin_grace_ms=cfg.pin_grace_ms,
                          free_space_ratio=cfg.free_space_ratio)
            store.open()
            teardown.callback(store.close)
            store.start_temp_pool()
            worker_id = cfg.worker_id or store.load_worker_id()
            tag.worker_id = worker_id
            metrics = worker_metrics(store.dirs)   # counted from the start, served once registered
            state = WorkerState(worker_id, metrics=metrics)

            fd_limit = raise_fd_limit()
            limits = server_limits(cfg).resolved(fd_limit)
            log.info("fd limit %d: at most %d connections, %d per peer; idle %gs, header %gs, auth %gs",
                     fd_limit, limits.max_connections, limits.max_per_peer, limits.idle_timeout_s,
                     limits.header_timeout_s, limits.auth_timeout_s)
            gate = ConnectionGate(limits)
            # Refused sockets held for their answer come out of the fd headroom (limits.py).
            refuser = Refuser(max_pending=min(128, max(8, limits.max_connections // 4)))
            refuser.start()
            teardown.callback(refuser.stop)

            unix_path = cfg.unix_socket or default_socket_path(store.dirs[0].path)
            short_circuit = ShortCircuitServer(store, state, path=unix_path, token=cfg.token,
                                               max_payload=cfg.max_payload, limits=limits, gate=gate,
                                               refuser=refuser)
            short_circuit.start()
            teardown.callback(short_circuit.stop)

            server = DataServer(store, state, host=cfg.host, port=cfg.port, token=cfg.token,
                                max_payload=cfg.max_payload, limits=limits, gate=gate, refuser=refuser,
                                tls=server_context(tls_files(cfg)) if tls_files(cfg).enabled else None)
            _, port = server.start()
            teardown.callback(server.stop)

            evictor = Evictor(store, high=cfg.high_watermark, low=cfg.low_watermark, metrics=metrics)
            evictor.start()
            teardown.callback(evictor.stop)

            scrubber = Scrubber(store, rate=cfg.scrub_rate)
            scrubber.start()
            teardown.callback(scrubber.stop)

            node = cfg.node or socket.gethostname()
            lm_port = 0
            if cfg.lm_port:
                lm_port = start_lm_server(cfg, node, teardown, limits, gate, metrics)
            host = advertised_host(cfg.host)
            # Before registering: the master lists the metrics port in its report (report --json).
            metrics_port = start_exporter(teardown, cfg.metrics_host or cfg.host, cfg.metrics_port, metrics.registry)
            advertised = Advertised(worker_id=worker_id, host=host, port=port, unix_socket=unix_path,
                                    node=node, lm_port=lm_port, metrics_port=metrics_port)
            heartbeat = Heartbeater(store, state, advertised, master=cfg.master, token=cfg.token,
                                    tls=tls_files(cfg))
            heartbeat.start()
            teardown.callback(heartbeat.stop)

            while not stop.is_set() and not heartbeat.registered.wait(0.1):
                pass
            if stop.is_set():
                log.info("stopped before registering with the master")
                return 0
            lm = f" lm={listen_host(cfg.lm_host)}:{lm_port}" if lm_port else ""
            lm += ready_field("metrics", cfg.metrics_host or cfg.host, metrics_port)
            print(f"worker={host}:{port} id={worker_id}{lm}", flush=True)
            while not stop.wait(1.0):
                pass
            log.info("stopping")
    except (CurvineError, OSError) as exc:
        log.error("cannot run worker: %s", exc)
        print(f"curvine-py worker: {exc}", file=sys.stderr)
        return 1
    log.info("stopped")
    return 0
