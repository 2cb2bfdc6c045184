"""`curvine-py up` as the whole product: master, worker with its lm:// port and the mount, and the
three LMCache settings it prints and writes (each checked against the real part it names)."""
from __future__ import annotations

import importlib
import json
import os
import pathlib
import signal
import socket

import yaml

from curvine_py.client import CurvineClient
from curvine_py.core import lmproto
from curvine_py.core.domain import StorageClass
from curvine_py.procs import RoleProcess, curvine_command, start
from curvine_py.transport.blocking import recv_exactly
from tests.harness import random_bytes, wait_until
from tests.integration.test_cli import cli


def stdout_lines(up: RoleProcess) -> list[str]:
    """up's own lines (its children's logs and its own go to stderr, merged into the same pipe)."""
    return [line for line in up.tail if line.startswith(("master=", "mount=", "lmcache "))]


def stop(up: RoleProcess) -> None:
    up.process.send_signal(signal.SIGINT)
    assert up.process.wait(30) == 0


def lm_round_trip(url: str) -> None:
    host, port = url.removeprefix("lm://").rsplit(":", 1)
    key, data = "vllm@qwen2@1@0@abc@bfloat16", random_bytes(300_000, seed=7)
    meta = lmproto.ObjectMeta(len(data), lmproto.MemoryFormat.BINARY, lmproto.Dtype.UINT8, (len(data), 0, 0, 0))
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(lmproto.encode_request(lmproto.Command.PUT, key, meta) + data)   # PUT has no reply

        def stored() -> bool:
            sock.sendall(lmproto.encode_request(lmproto.Command.EXIST, key))
            return lmproto.parse_reply(recv_exactly(sock, lmproto.REPLY_SIZE)).ok
        wait_until(stored, 10, "the PUT is stored")
        sock.sendall(lmproto.encode_request(lmproto.Command.GET, key))
        reply = lmproto.parse_reply(recv_exactly(sock, lmproto.REPLY_SIZE))
        assert reply.ok and reply.meta == meta and recv_exactly(sock, reply.meta.length) == data


def test_up_serves_all_three_lmcache_ways_and_prints_their_settings(tmp_path: pathlib.Path) -> None:
    data_dir = tmp_path / "cv"
    up = start("up", curvine_command("up", "--data-dir", str(data_dir), "--master-port", "0",
                                     "--worker-port", "0", "--lm-port", "0"),
               ready_prefix="lmcache examples:", timeout=90)
    try:
        lines = stdout_lines(up)
        master = (data_dir / "master.addr").read_text().strip()
        mountpoint = data_dir / "mnt"
        assert lines[0] == f"master={master}" and lines[1] == f"mount={mountpoint}"
        by_way = {line.split()[1]: line for line in lines[2:]}
        # 1. fs:// on the mount's cache directory, which up made with the cache class.
        fs_url = f"fs://localhost:0{mountpoint}/lmcache"
        assert by_way["fs://"].endswith(f'remote_url: "{fs_url}"')
        (mountpoint / "lmcache" / "chunk.data").write_bytes(b"kv chunk")
        with CurvineClient(master) as client:
            assert client.fs.get_policy("/lmcache").policy.storage_class == StorageClass.CACHE
            assert client.fs.stat("/lmcache/chunk.data").size == len(b"kv chunk")
        # 2. lm:// on the worker, node-local: a real round trip in LMCache's protocol.
        lm_url = by_way["lm://"].split('"')[1]
        assert lm_url.startswith("lm://127.0.0.1:")
        lm_round_trip(lm_url)
        # 3. the plugin's extra_config names an importable class and this master.
        extra = json.loads(by_way["plugin"].split("extra_config: ", 1)[1])
        assert extra["remote_storage_plugin.curvine.master"] == master
        module = importlib.import_module(extra["remote_storage_plugin.curvine.module_path"])
        assert hasattr(module, extra["remote_storage_plugin.curvine.class_name"])
        # The YAML examples say the same, one file per way.
        written = by_way["examples:"].split(": ", 1)[1].split()
        configs = {pathlib.Path(p).name: yaml.safe_load(pathlib.Path(p).read_text()) for p in written}
        assert configs["lmcache-fs.yaml"]["remote_url"] == fs_url
        assert configs["lmcache-lm.yaml"]["remote_url"] == lm_url
        assert configs["lmcache-plugin.yaml"]["extra_config"] == extra
        assert all(c["chunk_size"] == 256 and c["remote_serde"] == "naive" for c in configs.values())
    finally:
        stop(up)
    assert not os.path.ismount(mountpoint), "up unmounts on Ctrl-C"


def test_up_parts_turn_off(tmp_path: pathlib.Path) -> None:
    data_dir = tmp_path / "cv"
    up = start("up", curvine_command("up", "--data-dir", str(data_dir), "--master-port", "0",
                                     "--worker-port", "0", "--no-mount", "--no-lm"),
               ready_prefix="lmcache examples:", timeout=60)
    try:
        lines = stdout_lines(up)
        assert lines[0].startswith("master=") and not any(line.startswith("mount=") for line in lines)
        assert [line.split()[1] for line in lines[1:]] == ["plugin", "examples:"]
        assert sorted(os.listdir(data_dir)) == ["lmcache-plugin.yaml", "master", "master.addr", "worker"]
    finally:
        stop(up)


def test_up_bad_flags_are_refused() -> None:
    contradiction = cli("up", "--data-dir", "/nonexistent/x", "--mount", "/mnt/x", "--no-mount")
    assert contradiction.returncode == 2 and b"contradict" in contradiction.stderr
    negative = cli("up", "--data-dir", "/nonexistent/x", "--lm-port", "-1")
    assert negative.returncode == 2 and b"--no-lm" in negative.stderr
    assert not os.path.exists("/nonexistent/x"), "a refused up creates nothing"
