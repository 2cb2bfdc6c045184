"""`curvine-py master`: the composition root of the master process.

Opens the store (the engine --meta names, by default one SQLite file under --data-dir, locked
against a second master; master/engine/), restores the
membership, starts the store thread, the gRPC server and the maintenance task, announces readiness
(`master=HOST:PORT` on stdout and in DATA_DIR/master.addr) and runs until SIGTERM/SIGINT.
Teardown runs in reverse order: server (grace for in-flight calls), maintenance, store thread, DB.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import threading
from typing import Any

import grpc

from curvine_py import config
from curvine_py.core.errors import CurvineError, NotLeader, Unavailable
from curvine_py.master.engine import open as engine
from curvine_py.master.engine.url import SQLITE, MetaURL, parse_meta_url
from curvine_py.master.follower import LeaderHint, build_follower_server
from curvine_py.master.leaderlease import Lease, LeaseKeeper
from curvine_py.master.leases import DirLeases
from curvine_py.master.membership import Membership
from curvine_py.master.namespace import MIN_BLOCK_SIZE, Namespace
from curvine_py.master.repair import BlockCopier, Repairer
from curvine_py.master.service import MasterService, add_port, build_server, server_options
from curvine_py.master.sessions import Sessions
from curvine_py.master.standby import EXIT_LOST_LEADERSHIP, wait_for_leadership
from curvine_py.master.storethread import StoreThread
from curvine_py.master.types import StorageClass
from curvine_py.observe.logs import add_log_format_flag, setup_logging
from curvine_py.observe.roles import MasterObservability, add_metrics_flag, add_metrics_host_flag, add_status_flag
from curvine_py.rpc.tls import add_tls_options, tls_files

log = logging.getLogger(__name__)

DB_FILE = engine.DB_FILE
ADDR_FILE = "master.addr"
STOP_GRACE_S = 2.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="curvine-py master", description="curvine-py metadata service")
    p.add_argument("--data-dir", help="directory of the metadata database (created if missing)")
    p.add_argument("--meta", help="metadata engine URL: sqlite:///PATH/meta.db or postgresql://USER@HOST:PORT/DB "
                                  "(default: sqlite under --data-dir)")
    p.add_argument("--meta-password-file", help="file holding the PostgreSQL password (else PGPASSWORD/PGPASSFILE)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--advertise", help="HOST:PORT other masters send clients to while this one leads "
                                       "(PostgreSQL standby masters; default: --host and the bound port)")
    p.add_argument("--port", type=int, help="gRPC port (0 = any free port; default 8995)")
    p.add_argument("--leader-lease-ms", type=int,
                   help="PostgreSQL: a leader that has not renewed its lease this long is replaced by a "
                        "standby and steps down (default 3000)")
    p.add_argument("--token", help="shared secret required from every client and worker")
    config.add_token_file_option(p)
    add_tls_options(p)
    p.add_argument("--insecure", action="store_true", default=None,
                   help="allow a non-loopback --host without --token")
    p.add_argument("--lease-ms", type=int, help="a worker silent this long leaves the view (default 5000)")
    p.add_argument("--heartbeat-ms", type=int, help="heartbeat interval told to workers (default 1000)")
    p.add_argument("--dir-lease-ms", type=int,
                   help="term of the directory leases mounts may take (0 = none; default 2000)")
    p.add_argument("--unlink-grace-ms", type=int,
                   help="a file that lost its last name stays readable this long for readers on other "
                        "nodes before its blocks are freed (0 = at once; default 60000)")
    p.add_argument("--session-timeout-ms", type=int,
                   help="a mount not heard from this long is gone and the files it kept open after "
                        "their unlink are released (default 30000)")
    p.add_argument("--block-size", help="default file block size, e.g. 64MiB")
    p.add_argument("--repair-rate", help="bytes/s the re-replication of under-replicated blocks may copy, "
                                         "e.g. 64MiB (0 = off; default 64MiB)")
    p.add_argument("--config", help="TOML file; its [master] table sets defaults")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING... (env CURVINE_LOG_LEVEL; default INFO)")
    add_log_format_flag(p)
    add_metrics_flag(p)
    add_metrics_host_flag(p)
    add_status_flag(p)
    return p.parse_args(argv)


def load_config(args: argparse.Namespace) -> config.MasterConfig:
    flags: dict[str, Any] = {
        "data_dir": args.data_dir, "host": args.host, "advertise": args.advertise, "port": args.port, "token": args.token,
        "token_file": args.token_file, "tls_cert": args.tls_cert, "tls_key": args.tls_key, "tls_ca": args.tls_ca,
        "insecure": args.insecure, "lease_ms": args.lease_ms, "heartbeat_interval_ms": args.heartbeat_ms,
        "dir_lease_ms": args.dir_lease_ms, "unlink_grace_ms": args.unlink_grace_ms,
        "session_timeout_ms": args.session_timeout_ms, "leader_lease_ms": args.leader_lease_ms,
        "metrics_port": args.metrics_port, "status_port": args.status_port, "log_level": args.log_level,
        "metrics_host": args.metrics_host,
        "block_size": config.parse_size(args.block_size) if args.block_size else None,
        "repair_rate": config.parse_size(args.repair_rate) if args.repair_rate else None,
    }
    cfg = config.load(config.MasterConfig, section="master", toml_path=args.config, flags=flags)
    if cfg.block_size < MIN_BLOCK_SIZE or cfg.block_size % MIN_BLOCK_SIZE:
        raise CurvineError(f"block size must be a positive multiple of {MIN_BLOCK_SIZE}")
    if cfg.lease_ms <= 0 or cfg.heartbeat_interval_ms <= 0:
        raise CurvineError("lease and heartbeat interval must be positive")
    if cfg.dir_lease_ms < 0 or cfg.unlink_grace_ms < 0:
        raise CurvineError("the directory lease term and the unlink grace cannot be negative")
    if cfg.repair_rate < 0:
        raise CurvineError("the repair rate cannot be negative")
    if cfg.session_timeout_ms <= 0:
        raise CurvineError("the session timeout must be positive")
    if cfg.leader_lease_ms < 300:
        raise CurvineError("the leader lease must be at least 300 ms")
    if not 0 <= cfg.port < 65536:
        raise CurvineError(f"bad port {cfg.port}")
    if cfg.advertise and "," in cfg.advertise:
        raise CurvineError(f"--advertise {cfg.advertise!r}: one HOST:PORT, not a list")
    if cfg.advertise:
        config.normalize_address(cfg.advertise, cfg.port, what="--advertise")   # InvalidArgument if bad
    StorageClass.parse(cfg.root_policy_class)
    config.require_secure(cfg.host, cfg.token, cfg.insecure, "master")
    tls_files(cfg).check("master", server=True)
    return cfg


def meta_url(args: argparse.Namespace, cfg: config.MasterConfig) -> MetaURL:
    """The engine --meta names (default: SQLite under the data dir); refused before anything starts
    when malformed or not runnable here."""
    if args.meta:
        config.warn_password_in_url_flag(args.meta)
    url = (parse_meta_url(args.meta, password_file=args.meta_password_file or "") if args.meta
           else engine.default_url(os.path.abspath(cfg.data_dir)))
    if args.meta_password_file and not args.meta:
        raise CurvineError("--meta-password-file needs a postgresql:// --meta")
    engine.require_supported(url)
    return url


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def write_address(data_dir: str, address: str) -> None:
    path = os.path.join(data_dir, ADDR_FILE)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(address + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def advertised_address(host: str, port: int, advertise: str = "") -> str:
    """The address other masters name for this one (standby.py): --advertise, else the listen
    address, with a wildcard host replaced by this machine's address."""
    if advertise:
        return advertise
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostbyname(socket.gethostname())
    return format_address(host, port)


def listen(server: grpc.Server, host: str, port: int, cfg: config.MasterConfig) -> int:
    """Adds HOST:PORT to `server`; the bound port, or CurvineError."""
    where = format_address(host, port)
    try:
        bound = add_port(server, where, tls_files(cfg))
    except RuntimeError as exc:
        raise CurvineError(f"cannot listen on {where}: {exc}") from None
    if bound == 0:
        raise CurvineError(f"cannot listen on {where}")
    return bound


def start_lease_keeper(ns: Namespace, store: StoreThread, stop: threading.Event) -> threading.Thread | None:
    """PostgreSQL: the thread that renews the leader lease through the store thread and makes the
    master step down once it ran out (master/leaderlease.py)."""
    pg = ns.engine
    if pg is None or not pg.keeps_lease:
        return None
    keeper = LeaseKeeper(pg.lease, lambda: store.call(ns.renew_leader_lease), pg.fence)
    thread = threading.Thread(target=keeper.run, args=(stop,), name="master-leader-lease", daemon=True)
    thread.start()
    return thread


def serve(cfg: config.MasterConfig, url: MetaURL | None = None) -> int:
    data_dir = os.path.abspath(cfg.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    url = url or engine.default_url(data_dir)
    # Handlers first: a SIGTERM right after a ready line must still be a clean stop.
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with contextlib.ExitStack() as stack:
        stack.enter_context(engine.exclusive(url, data_dir))
        log.info("metadata engine %s", url.masked())
        options: dict[str, Any] = {
            "block_size": cfg.block_size, "root_class": StorageClass.parse(cfg.root_policy_class),
            "durable_replicas": cfg.default_replicas_durable, "unlink_grace_ms": cfg.unlink_grace_ms}
        follower: grpc.Server | None = None
        listen_port = cfg.port
        if url.engine == SQLITE:
            ns = engine.open_namespace(url, **options)
        else:
            # PostgreSQL: stand by as a follower on the port until this master holds the lock.
            hint = LeaderHint()
            follower = build_follower_server(hint.get, options=server_options())
            listen_port = listen(follower, cfg.host, cfg.port, cfg)
            follower.start()
            advertise = advertised_address(cfg.host, listen_port, cfg.advertise)
            standby_line = f"standby={format_address(cfg.host, listen_port)}"
            lease = Lease(cfg.leader_lease_ms / 1000)
            leading = wait_for_leadership(lambda: engine.open_namespace(url, advertise=advertise, lease=lease,
                                                                        **options),
                                          hint, stop, on_standby=lambda: print(standby_line, flush=True))
            if leading is None:
                follower.stop(0)
                log.info("stopped while standing by")
                return 0
            ns = leading
        membership = Membership(ns, lease_ms=cfg.lease_ms, heartbeat_interval_ms=cfg.heartbeat_interval_ms)
        store = StoreThread(ns)
        store.start()
        stack.callback(store.stop)
        keeper = start_lease_keeper(ns, store, stop)
        # A predecessor that granted directory leases: its holders may use them for one more term.
        leases = DirLeases(cfg.dir_lease_ms / 1000, grace_s=ns.lease_marker() / 1000)
        repairer = Repairer(ns, store, membership, BlockCopier(cfg.token, tls=tls_files(cfg)), rate=cfg.repair_rate)
        stack.callback(repairer.close)
        service = MasterService(ns, membership, store, leases, Sessions(cfg.session_timeout_ms / 1000),
                                repairer=repairer)
        stack.callback(service.close)
        observability = MasterObservability()
        server = build_server(service, cfg.token, first=[observability.interceptor])
        if follower is not None:
            # The port passes from the follower to the real server. Masters bind without
            # SO_REUSEPORT (service.py), so this leaves it closed for a moment: a caller with the
            # list of masters retries a refused connection (rpc/leader.py), nothing was sent.
            follower.stop(0).wait()
        port = listen(server, cfg.host, listen_port, cfg)
        server.start()
        address = format_address(cfg.host, port)
        write_address(data_dir, address)
        store.call(ns.set_leader_address, advertised_address(cfg.host, port, cfg.advertise))
        log.info("serving on %s (data %s, cluster %s, epoch %d, lease %d ms, block size %d)", address,
                 data_dir, ns.cluster_id, membership.epoch, cfg.lease_ms, cfg.block_size)
        fields = observability.start(stack, host=cfg.host, bind=cfg.metrics_host, metrics_port=cfg.metrics_port,
                                     status_port=cfg.status_port, master_port=port, token=cfg.token,
                                     tls=tls_files(cfg))
        service.metrics_port, service.status_port = observability.metrics_port, observability.status_port
        print(f"master={address}{fields}", flush=True)

        failure: list[BaseException] = []

        def maintain() -> None:
            while True:
                try:
                    service.maintain(stop)
                    return
                except NotLeader as exc:
                    failure.append(exc)
                    stop.set()
                    return
                except Unavailable as exc:   # the metadata database is down for now: try again
                    log.warning("maintenance: %s", exc.message)
                    if stop.wait(1.0):
                        return
                except BaseException as exc:   # noqa: BLE001 - reported by the main thread
                    failure.append(exc)
                    stop.set()
                    return

        def lost_leadership() -> None:   # PostgreSQL: another master leads now; this one stops
            failure.append(NotLeader())
            stop.set()

        if ns.engine is not None:
            ns.engine.on_lost_leadership(lost_leadership)

        maintenance = threading.Thread(target=maintain, name="master-maintenance", daemon=True)
        maintenance.start()
        repairs = threading.Thread(target=repairer.run, args=(stop,), name="master-repair", daemon=True)
        if repairer.enabled:
            repairs.start()
        while not stop.wait(1.0):   # a timed wait: signal handlers run between waits
            pass
        log.info("stopping")
        server.stop(STOP_GRACE_S).wait()
        maintenance.join()
        if repairs.is_alive():
            repairs.join()
        if keeper is not None:
            keeper.join()
        if failure and isinstance(failure[0], NotLeader):
            log.error("lost the leadership: exiting (its supervisor starts it again as a standby)")
            return EXIT_LOST_LEADERSHIP
        if failure:
            log.error("maintenance failed", exc_info=failure[0])
            return 1
    log.info("stopped")
    return 0


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # Logging first (a bad config is reported in the chosen format), at the level the layered
    # config settles on once it is read.
    setup_logging("master", socket.gethostname(), args.log_level or "INFO", args.log_format)
    try:
        cfg = load_config(args)
        logging.getLogger().setLevel(cfg.log_level.upper())
        return serve(cfg, meta_url(args, cfg))
    except CurvineError as exc:
        log.error("%s", exc.message)
        return 2
    except ValueError as exc:
        log.error("%s", exc)
        return 2
