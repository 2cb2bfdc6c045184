"""`curvine-py up`: the embedded default, the whole product on one machine. A master, one worker
with its lm:// port (node-local) and a FUSE mount under one data dir, on loopback by default.
When everything serves it prints `master=HOST:PORT` (first, and written to DIR/master.addr), then
the three LMCache settings ready to paste (the `fs://` URL on the mount's cache directory, which it
creates with the `cache` policy; the `lm://` URL; the native plugin's `extra_config`), and writes
one LMCache YAML example per way to DIR/lmcache-{fs,lm,plugin}.yaml. --no-mount and --no-lm turn
those parts off. Ctrl-C (or SIGTERM) stops everything cleanly, children first.

Secrets: the token (--token-file F, CURVINE_TOKEN_FILE or CURVINE_TOKEN) reaches the children in
their environment (CURVINE_TOKEN), never on their command lines, which `ps` shows to every user.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass, replace

from curvine_py.client import CurvineClient
from curvine_py.config import (
    DEFAULT_MASTER_PORT,
    DEFAULT_WORKER_PORT,
    ClientConfig,
    add_token_file_option,
    load,
)
from curvine_py.core.domain import StorageClass
from curvine_py.core.errors import CurvineError
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
    p.add_argument("--capacity", default="0", help="worker capacity, e.g. 20GB (0 = the disk's size)")
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


def settings_for(master: str, mountpoint: str | None, lm_address: str | None) -> LmcacheSettings:
    # LMCache 0.5.6 demands a host and a port in fs:// URLs and ignores both (docs/lmcache.md).
    fs_url = f"fs://localhost:0{mountpoint.rstrip('/')}{LMCACHE_DIR}" if mountpoint else None
    extra = {"remote_storage_plugin.curvine.module_path": "curvine_py.lmcache.connector",
             "remote_storage_plugin.curvine.class_name": "CurvineConnectorAdapter",
             "remote_storage_plugin.curvine.master": master}
    return LmcacheSettings(fs_url, f"lm://{lm_address}" if lm_address else None, extra)


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
    lines.append("lmcache examples: " + " ".join(written))
    return lines


def make_cache_dir(master: str, token: str) -> None:
    """DIR/lmcache in the namespace with the `cache` class: LMCache never deletes its chunks, so
    the worker's watermarks evict them (LRU) instead of filling the disk."""
    with CurvineClient(master, token=token) as client:
        client.fs.mkdir(LMCACHE_DIR, parents=True)
        policy = replace(client.fs.get_policy(LMCACHE_DIR).policy, storage_class=StorageClass.CACHE)
        client.fs.set_policy(LMCACHE_DIR, policy)


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
    data_dir = os.path.abspath(args.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    mountpoint = None if args.no_mount else os.path.abspath(args.mount or os.path.join(data_dir, "mnt"))
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
    try:
        master = start("master", curvine_command(
            "master", "--data-dir", os.path.join(data_dir, "master"), "--host", args.host,
            "--port", str(args.master_port)), ready_prefix="master=", echo=args.verbose, env=secrets)
        children.append(master)
        worker_dir = os.path.join(data_dir, "worker")
        os.makedirs(worker_dir, exist_ok=True)
        capacity = f":{args.capacity}" if args.capacity != "0" else ""
        # The lm:// port stays on loopback whatever --host says: LMCache's protocol has no credentials.
        lm = [] if args.no_lm else ["--lm-host", "127.0.0.1", "--lm-port", str(args.lm_port or -1)]
        worker = start("worker", curvine_command(
            "worker", "--master", master.address, "--data-dir", worker_dir + capacity, "--host", args.host,
            "--port", str(args.worker_port), *lm), ready_prefix="worker=", echo=args.verbose, env=secrets)
        children.append(worker)
        if mountpoint:
            os.makedirs(mountpoint, exist_ok=True)   # the one-command default creates its mountpoint
            children.append(start("mount", curvine_command(
                "mount", "--master", master.address, mountpoint), ready_prefix="mounted=",
                echo=args.verbose, env=secrets))
            make_cache_dir(master.address, token)
        settings = settings_for(master.address, mountpoint, None if args.no_lm else worker.field("lm"))
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
    except CurvineError as exc:
        print(f"curvine-py up: {exc}", file=sys.stderr)
        return 1
    finally:
        for child in reversed(children):   # mount first, master last
            child.stop()
