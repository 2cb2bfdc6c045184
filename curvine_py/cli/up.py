"""`curvine-py up`: the embedded default, the whole product on one machine. A master, one worker
with its lm:// port (node-local) and a FUSE mount under one data dir, on loopback by default.
When everything serves it prints `master=HOST:PORT` (first, and written to DIR/master.addr), then
the three LMCache settings ready to paste (the `fs://` URL on the mount's cache directory, which it
creates with the `cache` policy; the `lm://` URL; the native plugin's `extra_config`), and writes
one LMCache YAML example per way to DIR/lmcache-{fs,lm,plugin}.yaml. On LMCache >= 0.5.7 (no
lm://) the lm:// way is replaced by the multiprocess native_plugin adapter (DIR/lmcache-native.json). --no-mount and --no-lm turn
those parts off. --metrics-port turns on Prometheus /metrics on every role and --status-port the
master's HTML status page, both bound on --host; their URLs are among the ready lines. Ctrl-C (or
SIGTERM) stops everything cleanly, children first. A port already taken is named before anything
starts.

Secrets: the token (--token-file F, CURVINE_TOKEN_FILE or CURVINE_TOKEN) reaches the children in
their environment (CURVINE_TOKEN), never on their command lines, which `ps` shows to every user.
"""
from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
from dataclasses import dataclass, replace

from curvine_py.client import CurvineClient
from curvine_py.config import (
    DEFAULT_MASTER_PORT,
    DEFAULT_WORKER_PORT,
    SIZE_UNITS_HELP,
    ClientConfig,
    add_token_file_option,
    load,
)
from curvine_py.core.domain import StorageClass
from curvine_py.core.errors import CurvineError, Unavailable
from curvine_py.lmcache import adapters, compat
from curvine_py.observe.roles import endpoint
from curvine_py.procs import RoleProcess, curvine_command, start

log = logging.getLogger(__name__)

DEFAULT_UP_LM_PORT = 65432      # LMCache's own lm:// server port, so its examples work as written
LMCACHE_DIR = "/lmcache"        # the namespace directory the fs:// way writes into
# What every way needs in every vLLM process (docs/lmcache.md): same chunk size, naive serde.
_COMMON_YAML = 'chunk_size: 256\nlocal_cpu: true\nmax_local_cpu_size: 5\nremote_serde: "naive"\n'
_ENV_HINT = "# run vLLM with LMCACHE_CONFIG_FILE=<this file> PYTHONHASHSEED=0 LMCACHE_TRACK_USAGE=false\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py up", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True, help="everything lives under this directory")
    p.add_argument("--mount", help="mount the namespace here (FUSE; default DATA_DIR/mnt)")
    p.add_argument("--no-mount", action="store_true", help="no FUSE mount (and so no fs:// setting)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=DEFAULT_MASTER_PORT)
    p.add_argument("--worker-port", type=int, default=DEFAULT_WORKER_PORT)
    p.add_argument("--lm-port", type=int, default=DEFAULT_UP_LM_PORT,
                   help="the worker's lm:// port, bound on 127.0.0.1 (0 = any free port)")
    p.add_argument("--no-lm", action="store_true", help="no lm:// port (and so no lm:// setting)")
    p.add_argument("--capacity", default="0",
                   help=f"worker capacity, e.g. 20GB or 20GiB ({SIZE_UNITS_HELP}; 0 = the disk's size)")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="Prometheus /metrics of every role, on --host: the master's on PORT, the worker's on "
                        "PORT+1, the mount's on PORT+2 (-1 = any free ports; 0 = off, the default)")
    p.add_argument("--status-port", type=int, default=0,
                   help="the master's read-only HTML status page, on --host (-1 = any free port; "
                        "0 = off, the default)")
    p.add_argument("--token", help="shared secret (visible in ps: prefer --token-file or CURVINE_TOKEN)")
    add_token_file_option(p)
    p.add_argument("--verbose", action="store_true", help="echo the children's logs")
    return p


@dataclass(frozen=True, slots=True)
class LmcacheSettings:
    """The three ways LMCache reaches this cluster; None = that part is off."""
    fs_url: str | None
    lm_url: str | None
    plugin_extra_config: dict[str, str]
    native_adapter: dict[str, object] | None = None   # `lmcache server --l2-adapter` (multiprocess)


def lm_protocol_available() -> bool:
    """lm:// only where the installed LMCache still has it (<= 0.5.6); LMCache absent from this
    environment: assume the locked 0.5.6 that vLLM's side is documented with."""
    try:
        return compat.has_lm_protocol()
    except ImportError:
        return True


def settings_for(master: str, mountpoint: str | None, lm_address: str | None,
                 lm_ok: bool = True) -> LmcacheSettings:
    # LMCache 0.5.6 demands a host and a port in fs:// URLs and ignores both (docs/lmcache.md).
    fs_url = f"fs://localhost:0{mountpoint.rstrip('/')}{LMCACHE_DIR}" if mountpoint else None
    extra = {"remote_storage_plugin.curvine.module_path": "curvine_py.lmcache.connector",
             "remote_storage_plugin.curvine.class_name": "CurvineConnectorAdapter",
             "remote_storage_plugin.curvine.master": master}
    lm_url = f"lm://{lm_address}" if lm_address and lm_ok else None
    # LMCache >= 0.5.7 has no lm://: its primary way is the multiprocess native_plugin adapter.
    native = None if lm_ok else adapters.native_plugin(master)
    return LmcacheSettings(fs_url, lm_url, extra, native)


def yaml_examples(s: LmcacheSettings) -> dict[str, str]:
    """File name -> LMCache YAML config, one per way that is on."""
    files = {}
    if s.fs_url:
        files["lmcache-fs.yaml"] = f'{_ENV_HINT}{_COMMON_YAML}remote_url: "{s.fs_url}"\n'
    if s.lm_url:
        files["lmcache-lm.yaml"] = f'{_ENV_HINT}{_COMMON_YAML}remote_url: "{s.lm_url}"\n'
    extra = "".join(f'  {k}: "{v}"\n' for k, v in s.plugin_extra_config.items())
    files["lmcache-plugin.yaml"] = (f"{_ENV_HINT}# needs the curvine-py package in vLLM's environment"
                                    f" (and CURVINE_TOKEN when the cluster has a token)\n{_COMMON_YAML}"
                                    f'remote_storage_plugins: ["curvine"]\nextra_config:\n{extra}')
    if s.native_adapter:
        files["lmcache-native.json"] = json.dumps(s.native_adapter, indent=1) + "\n"
    return files


def settings_lines(s: LmcacheSettings, written: list[str]) -> list[str]:
    """What `up` prints after `master=`: each setting as it goes into an LMCache config."""
    lines = []
    if s.fs_url:
        lines.append(f'lmcache fs://   remote_url: "{s.fs_url}"')
    if s.lm_url:
        lines.append(f'lmcache lm://   remote_url: "{s.lm_url}"')
    lines.append('lmcache plugin  remote_storage_plugins: ["curvine"]  extra_config: '
                 + json.dumps(s.plugin_extra_config))
    if s.native_adapter:
        lines.append(f"lmcache server  --l2-adapter '{json.dumps(s.native_adapter)}'")
    lines.append("lmcache examples: " + " ".join(written))
    return lines


def endpoint_lines(children: list[RoleProcess]) -> list[str]:
    """`metrics master=URL worker=URL mount=URL` and `status=URL` for the endpoints that are on,
    read from the children's ready lines (` metrics=HOST:PORT`, ` status=HOST:PORT`)."""
    urls = []
    status = ""
    for child in children:
        fields = {key: value for key, _, value in (token.partition("=") for token in child.ready.split()[1:])}
        if fields.get("metrics"):
            urls.append(f"{child.name}=http://{fields['metrics']}/metrics")
        if fields.get("status"):
            status = f"status=http://{fields['status']}/"
    return ([f"metrics {' '.join(urls)}"] if urls else []) + ([status] if status else [])


def data_dir_of(args: argparse.Namespace) -> str:
    return os.path.abspath(str(args.data_dir))


def port_problem(args: argparse.Namespace, mount: bool) -> str:
    """What is wrong with the ports asked for, before anything starts ('' when nothing is)."""
    for flag, port in (("--metrics-port", args.metrics_port), ("--status-port", args.status_port)):
        if not -1 <= port < 65536:
            return f"{flag} must be a port, 0 (off) or -1 (any free port), not {port}"
    if args.metrics_port > 0 and max(metrics_ports(args.metrics_port, mount).values()) > 65535:
        return f"--metrics-port {args.metrics_port}: the roles take PORT to PORT+2, past 65535"
    return check_ports(args.host, fixed_ports(args, mount))


def make_cache_dir(master: str, token: str) -> None:
    """DIR/lmcache in the namespace with the `cache` class: LMCache never deletes its chunks, so
    the worker's watermarks evict them (LRU) instead of filling the disk."""
    with CurvineClient(master, token=token) as client:
        client.fs.mkdir(LMCACHE_DIR, parents=True)
        policy = replace(client.fs.get_policy(LMCACHE_DIR).policy, storage_class=StorageClass.CACHE)
        client.fs.set_policy(LMCACHE_DIR, policy)


@dataclass(frozen=True, slots=True)
class Port:
    """A port `up` will bind, and what asks for it (for the message when it is taken)."""
    port: int
    flag: str
    role: str


def metrics_ports(base: int, mount: bool) -> dict[str, int]:
    """The /metrics port of each role for --metrics-port BASE (0 off, -1 any free port)."""
    roles = ["master", "worker", *(["mount"] if mount else [])]
    if base <= 0:
        return dict.fromkeys(roles, base)
    return {role: base + offset for offset, role in enumerate(roles)}


def fixed_ports(args: argparse.Namespace, mount: bool) -> list[Port]:
    """The ports named on the command line (0 and -1 are any free port: nothing to check)."""
    ports = [Port(args.master_port, "--master-port", "master"), Port(args.worker_port, "--worker-port", "worker"),
             Port(args.status_port, "--status-port", "master's status page")]
    if not args.no_lm:
        ports.append(Port(args.lm_port, "--lm-port", "worker's lm://"))
    ports += [Port(port, "--metrics-port", f"{role}'s /metrics")
              for role, port in metrics_ports(args.metrics_port, mount).items()]
    return [p for p in ports if p.port > 0]


def check_ports(host: str, ports: list[Port], lm_host: str = "127.0.0.1") -> str:
    """'' when every port can be bound now; else what is wrong with the first one that cannot,
    cause first: the message an operator needs instead of "did not become ready"."""
    seen: dict[int, Port] = {}
    for p in ports:
        if p.port in seen:
            return (f"port {p.port} is asked for twice: {seen[p.port].flag} ({seen[p.port].role}) "
                    f"and {p.flag} ({p.role})")
        seen[p.port] = p
        address = lm_host if p.flag == "--lm-port" else host
        try:
            infos = socket.getaddrinfo(address, p.port, type=socket.SOCK_STREAM)
            with socket.socket(infos[0][0], socket.SOCK_STREAM) as probe:
                # As the servers bind: SO_REUSEADDR, so a port in TIME_WAIT is not "taken".
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(infos[0][4])
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return (f"address in use: {endpoint(address, p.port)} ({p.flag}, the {p.role}) is already "
                        "taken, by another curvine-py up or master perhaps (`ss -ltnp` names it); stop it "
                        f"or give {p.flag} another port (0 = any free port)")
            return f"cannot bind {endpoint(address, p.port)} ({p.flag}, the {p.role}): {exc.strerror or exc}"
    return ""


_IN_USE = re.compile(r"address already in use|EADDRINUSE", re.IGNORECASE)
_ADDRESS = re.compile(r"(\[[0-9A-Fa-f:.]+\]|\d{1,3}(?:\.\d{1,3}){3}|localhost):(\d{1,5})\b")
_START = re.compile(r"^(?P<role>\S+) did not become ready within \d+s \(exit code (?P<code>-?\d+|None)\):\n?")


def start_failure(exc: Unavailable) -> str:
    """procs.start's message for a child that failed to start, led by its cause when its output
    says one (a port in use), and by "exited at once" instead of "did not become ready" when the
    child died rather than stayed silent."""
    message = exc.message
    match = _START.match(message)
    if match is None:
        return message
    role, code, output = match["role"], match["code"], message[match.end():]
    lines = output.splitlines()
    in_use = next((line for line in lines if _IN_USE.search(line)), None)
    if in_use is not None:
        address = _ADDRESS.search(in_use)
        where = f"{address[1]}:{address[2]}" if address else "its port"
        lead = f"address in use: the {role} cannot listen on {where}, which something else holds"
    elif code not in ("None", "-9"):
        lead = f"the {role} exited with code {code} while starting"
    else:
        return message
    return f"{lead}\n{role}'s last lines:\n{output}"


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s up: %(message)s")
    if args.no_mount and args.mount:
        print("curvine-py up: --mount and --no-mount contradict each other", file=sys.stderr)
        return 2
    if args.lm_port < 0:
        print("curvine-py up: --lm-port must be a port or 0 (any free port); --no-lm turns it off",
              file=sys.stderr)
        return 2
    mountpoint = None if args.no_mount else os.path.abspath(args.mount or os.path.join(data_dir_of(args), "mnt"))
    problem = port_problem(args, mountpoint is not None)
    if problem:
        print(f"curvine-py up: {problem}", file=sys.stderr)
        return 2
    data_dir = data_dir_of(args)
    os.makedirs(data_dir, exist_ok=True)
    try:
        token = load(ClientConfig, section="client", flags={"token": args.token, "token_file": args.token_file}).token
    except CurvineError as exc:
        print(f"curvine-py up: {exc}", file=sys.stderr)
        return 2
    # The children read it from CURVINE_TOKEN; a token file of ours must not compete with it.
    secrets: dict[str, str | None] = {"CURVINE_TOKEN": token or None, "CURVINE_TOKEN_FILE": None}
    children: list[RoleProcess] = []
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    metrics = metrics_ports(args.metrics_port, mountpoint is not None)
    try:
        master = start("master", curvine_command(
            "master", "--data-dir", os.path.join(data_dir, "master"), "--host", args.host,
            "--port", str(args.master_port), "--metrics-port", str(metrics["master"]),
            "--status-port", str(args.status_port)), ready_prefix="master=", echo=args.verbose, env=secrets)
        children.append(master)
        worker_dir = os.path.join(data_dir, "worker")
        os.makedirs(worker_dir, exist_ok=True)
        capacity = f":{args.capacity}" if args.capacity != "0" else ""
        # The lm:// port stays on loopback whatever --host says: LMCache's protocol has no credentials.
        lm = [] if args.no_lm else ["--lm-host", "127.0.0.1", "--lm-port", str(args.lm_port or -1)]
        worker = start("worker", curvine_command(
            "worker", "--master", master.address, "--data-dir", worker_dir + capacity, "--host", args.host,
            "--port", str(args.worker_port), "--metrics-port", str(metrics["worker"]), *lm),
            ready_prefix="worker=", echo=args.verbose, env=secrets)
        children.append(worker)
        if mountpoint:
            os.makedirs(mountpoint, exist_ok=True)   # the one-command default creates its mountpoint
            children.append(start("mount", curvine_command(
                "mount", "--master", master.address, mountpoint, "--metrics-port", str(metrics["mount"]),
                "--metrics-host", args.host), ready_prefix="mounted=", echo=args.verbose, env=secrets))
            make_cache_dir(master.address, token)
        settings = settings_for(master.address, mountpoint, None if args.no_lm else worker.field("lm"),
                                lm_ok=lm_protocol_available())
        written = []
        for name, text in yaml_examples(settings).items():
            path = os.path.join(data_dir, name)
            with open(path, "w") as fh:
                fh.write(text)
            written.append(path)
        with open(os.path.join(data_dir, "master.addr"), "w") as fh:
            fh.write(master.address + "\n")
        print(f"master={master.address}", flush=True)
        if mountpoint:
            print(f"mount={mountpoint}", flush=True)
        for line in endpoint_lines(children):
            print(line, flush=True)
        for line in settings_lines(settings, written):
            print(line, flush=True)
        while not stop.wait(0.5):
            dead = [c for c in children if not c.alive()]
            if dead:
                for child in dead:
                    log.error("%s exited with %s; stopping:\n%s", child.name, child.process.returncode,
                              "\n".join(child.tail))
                return 1
        return 0
    except Unavailable as exc:
        print(f"curvine-py up: {start_failure(exc)}", file=sys.stderr)
        return 1
    except CurvineError as exc:
        print(f"curvine-py up: {exc}", file=sys.stderr)
        return 1
    finally:
        for child in reversed(children):   # mount first, master last
            child.stop()
