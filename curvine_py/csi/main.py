"""`curvine-py csi --endpoint unix:///path/csi.sock --node-id ID [--controller] [--node]
--master HOST:PORT[,HOST:PORT...] [--token-file F]`: the composition root of the CSI plugin.

Prints one ready line `csi=<socket path>` once it serves. SIGTERM/SIGINT stop the server (exit 0);
the FUSE mounts of staged volumes keep running and are adopted by the next plugin.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from curvine_py.config import parse_master_list
from curvine_py.core.errors import CurvineError, InvalidArgument
from curvine_py.csi.catalog import DEFAULT_INDEX_DIR
from curvine_py.csi.driver import Driver
from curvine_py.csi.driver_settings import DriverSettings
from curvine_py.csi.identity import DRIVER_NAME
from curvine_py.csi.server import serve
from curvine_py.csi.volumes import DEFAULT_BASE_PATH
from curvine_py.observe.logs import add_log_format_flag, setup_logging

log = logging.getLogger(__name__)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py csi", description="Kubernetes CSI driver for curvine-py.")
    p.add_argument("--endpoint", default=os.environ.get("CSI_ENDPOINT", ""),
                   help="unix:///path/csi.sock (env CSI_ENDPOINT)")
    p.add_argument("--node-id", default=os.environ.get("NODE_ID", ""), help="this node's name (env NODE_ID)")
    p.add_argument("--controller", action="store_true", help="serve the Controller service")
    p.add_argument("--node", action="store_true", help="serve the Node service")
    p.add_argument("--master", default=os.environ.get("CURVINE_MASTER", ""),
                   help="HOST:PORT of the master, or a comma list of several masters, passed on to every "
                        "mount (env CURVINE_MASTER)")
    p.add_argument("--token-file", default="", help="file holding the cluster's shared secret")
    p.add_argument("--driver-name", default=DRIVER_NAME)
    p.add_argument("--base-path", default=DEFAULT_BASE_PATH,
                   help=f"where volumes are made when the StorageClass names no basePath (default {DEFAULT_BASE_PATH})")
    p.add_argument("--index-dir", default=DEFAULT_INDEX_DIR, help=f"the volume index (default {DEFAULT_INDEX_DIR})")
    p.add_argument("--state-dir", default="/var/lib/curvine-csi",
                   help="node-local dir for the state of staged volumes and mount logs (node)")
    p.add_argument("--path-root", action="append", default=[],
                   help="staging and target paths must lie below this dir (repeatable; node; default "
                        "/var/lib/kubelet): any other path is INVALID_ARGUMENT")
    p.add_argument("--mount-cgroup", default="",
                   help="move every mount process into this cgroup (a name below --cgroup-root), out of the "
                        "plugin container's, so a restart or upgrade of the plugin container leaves the mounts "
                        "serving (node; needs hostPID and the host's cgroup fs)")
    p.add_argument("--cgroup-root", default="/sys/fs/cgroup", help="the host's cgroup file system (node)")
    p.add_argument("--max-volumes", type=int, default=0, help="volumes per node reported to the CO (0: no limit)")
    p.add_argument("--mount-arg", action="append", default=[],
                   help="extra argument for every `curvine-py mount` (repeatable), e.g. --mount-arg=--deadline=30")
    p.add_argument("--recovery-interval", type=float, default=1.0,
                   help="seconds between looks for dead volume mounts (node; default 1)")
    p.add_argument("--log-level", default=os.environ.get("CURVINE_LOG_LEVEL", "INFO"))
    add_log_format_flag(p)
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """Flags, checked (no I/O: the deployment tests run it over the manifests' commands)."""
    args = parser().parse_args(argv)
    if not args.endpoint:
        raise InvalidArgument("--endpoint unix:///path/csi.sock is required")
    if not args.node_id:
        raise InvalidArgument("--node-id is required")
    if not args.master:
        raise InvalidArgument("--master HOST:PORT is required")
    args.master = ",".join(parse_master_list(args.master))      # InvalidArgument for a bad list
    if args.recovery_interval <= 0:
        raise InvalidArgument("--recovery-interval must be > 0")
    for root in args.path_root:
        if not root.startswith("/") or os.path.normpath(root) == "/":
            raise InvalidArgument(f"--path-root {root!r}: an absolute dir other than / is needed")
    if not (args.controller or args.node):
        raise InvalidArgument("serve at least one of --controller and --node")
    return args


def settings_from(argv: list[str]) -> tuple[str, DriverSettings, tuple[str, str | None]]:
    """The endpoint, the driver's settings and (log level, log format)."""
    args = parse(argv)
    token = os.environ.get("CURVINE_TOKEN", "")
    if args.token_file:
        try:
            with open(args.token_file) as fh:
                token = fh.read().strip()
        except OSError as exc:
            raise InvalidArgument(f"--token-file {args.token_file}: {exc.strerror}") from None
    settings = DriverSettings(node_id=args.node_id, controller=args.controller, node=args.node, master=args.master,
                              token=token, name=args.driver_name, base_path=args.base_path,
                              index_dir=args.index_dir, state_dir=args.state_dir, max_volumes=args.max_volumes,
                              mount_args=tuple(args.mount_arg), recovery_interval_s=args.recovery_interval,
                              path_roots=tuple(args.path_root) or ("/var/lib/kubelet",),
                              mount_cgroup=args.mount_cgroup, cgroup_root=args.cgroup_root)
    return args.endpoint, settings, (args.log_level, args.log_format)


def main(argv: list[str]) -> int:
    try:
        endpoint, settings, (level, log_format) = settings_from(argv)
    except CurvineError as exc:
        print(f"curvine-py csi: {exc.message}", file=sys.stderr)
        return 2
    roles = "+".join(r for r, on in (("controller", settings.controller), ("node", settings.node)) if on)
    setup_logging(f"csi-{roles}", settings.node_id, level, log_format)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        driver = Driver(settings)
        server, path = serve(endpoint, driver.register)
    except CurvineError as exc:
        print(f"curvine-py csi: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:       # e.g. a state dir or socket dir that cannot be made
        print(f"curvine-py csi: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return 1
    try:
        driver.start()
        log.info("serving %s on %s (master %s)", roles, path, settings.master)
        print(f"csi={path}", flush=True)
        stop.wait()
        log.info("stopping")
    finally:
        server.stop(grace=5).wait()
        driver.stop()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return 0
