"""The command-line tools against a real cluster, and the one-command embedded default (`up`)."""
from __future__ import annotations

import errno
import json
import os
import pathlib
import signal
import subprocess
import sys

from curvine_py.client import CurvineClient
from curvine_py.procs import curvine_command, start
from tests.harness import Cluster


def cli(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(curvine_command(*args), check=False, capture_output=True, env={**os.environ, **(env or {})},
                          input=stdin, timeout=60)


def test_fs_tools(cluster1: Cluster, tmp_path: pathlib.Path) -> None:
    master = ["--master", cluster1.master_address]
    local = tmp_path / "in.bin"
    local.write_bytes(os.urandom(3 << 20))
    assert cli("fs", *master, "mkdir", "-p", "/a/b").returncode == 0
    assert cli("fs", *master, "put", str(local), "/a/b/f").returncode == 0
    listing = cli("fs", *master, "ls", "/a/b").stdout.decode()
    assert "/a/b/f" in listing and str(3 << 20) in listing
    stat = json.loads(cli("fs", *master, "stat", "--json", "/a/b/f").stdout)
    assert stat["size"] == 3 << 20 and stat["kind"] == "file"
    assert cli("fs", *master, "mv", "/a/b/f", "/a/g").returncode == 0
    assert cli("fs", *master, "get", "/a/g", str(tmp_path / "out.bin")).returncode == 0
    assert (tmp_path / "out.bin").read_bytes() == local.read_bytes()
    assert cli("fs", *master, "cat", "/a/g").stdout == local.read_bytes()
    assert cli("fs", *master, "du", "/a").stdout.decode().split()[0] == str(3 << 20)
    assert "capacity" in cli("fs", *master, "df").stdout.decode()
    missing = cli("fs", *master, "stat", "/nope")
    assert missing.returncode == 1 and b"ENOENT" in missing.stderr
    assert cli("fs", *master, "rm", "/a").returncode == 1            # not empty
    assert cli("fs", *master, "rm", "-r", "/a").returncode == 0
    assert cli("fs", *master, "ls", "/").stdout.strip() == b""


def test_directory_policy_tool(cluster1: Cluster) -> None:
    master = ["--master", cluster1.master_address]
    assert cli("fs", *master, "mkdir", "-p", "/l2cache/model").returncode == 0
    shown = cli("fs", *master, "policy", "/l2cache/model").stdout.decode()
    assert "class=durable" in shown and "defined at /" in shown
    assert cli("fs", *master, "policy", "/l2cache", "--class", "cache", "--ttl-ms", "60000").returncode == 0
    shown = cli("fs", *master, "policy", "/l2cache/model").stdout.decode()
    assert "class=cache" in shown and "ttl_ms=60000" in shown and "defined at /l2cache" in shown
    bad = cli("fs", *master, "policy", "/l2cache", "--class", "fast")
    assert bad.returncode == 2 and b"invalid choice" in bad.stderr


def test_kv_tools_and_env_master(cluster1: Cluster, tmp_path: pathlib.Path) -> None:
    env = {"CURVINE_MASTER": cluster1.master_address}
    value = tmp_path / "value"
    value.write_bytes(b"kv bytes" * 1000)
    assert cli("kv", "put", "k1", str(value), env=env).returncode == 0
    assert cli("kv", "exists", "k1", env=env).returncode == 0
    assert cli("kv", "get", "k1", "-", env=env).stdout == value.read_bytes()
    miss = cli("kv", "get", "nope", "-", env=env)
    assert miss.returncode == 1 and b"miss" in miss.stderr
    assert cli("kv", "exists", "nope", env=env).returncode == 1
    assert cli("kv", "rm", "k1", env=env).returncode == 0
    assert cli("kv", "rm", "k1", env=env).returncode == 1
    assert cli("kv", "put", "from-stdin", "-", env=env, stdin=b"piped").returncode == 0
    assert cli("kv", "get", "from-stdin", "-", env=env).stdout == b"piped"


def test_report(cluster3: Cluster) -> None:
    cluster3.wait_for_live_workers(3)
    report = json.loads(cli("report", "--master", cluster3.master_address, "--json").stdout)
    assert len(report["workers"]) == 3 and all(w["live"] for w in report["workers"])
    assert int(report["capacity"]) > 0
    text = cli("report", "--master", cluster3.master_address).stdout.decode()
    assert "3 live / 3" in text


def test_unreachable_master_is_a_clear_error() -> None:
    result = cli("fs", "--master", "127.0.0.1:1", "--timeout", "1", "ls", "/")
    assert result.returncode == 1 and b"curvine-py fs:" in result.stderr


def test_up_runs_the_embedded_default_and_stops_cleanly(tmp_path: pathlib.Path) -> None:
    up = start("up", curvine_command("up", "--data-dir", str(tmp_path / "cv"), "--master-port", "0",
                                     "--worker-port", "0", "--lm-port", "0"), ready_prefix="master=", timeout=60)
    try:
        address = up.address
        assert (tmp_path / "cv" / "master.addr").read_text().strip() == address
        with CurvineClient(address) as client:
            client.kv.put("hello", b"world")
            assert client.kv.get("hello") == b"world"
            with client.fs.open("/note", "wb") as handle:
                handle.write(b"embedded")
            assert client.fs.stat("/note").size == 8
    finally:
        up.process.send_signal(signal.SIGINT)
        assert up.process.wait(30) == 0
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path / "cv")], check=False, capture_output=True, text=True)
    assert leftovers.stdout.strip() == "", "up stops its children"


def test_up_with_mount_creates_the_mountpoint(tmp_path: pathlib.Path) -> None:
    mountpoint = tmp_path / "not-yet" / "mnt"
    up = start("up", curvine_command("up", "--data-dir", str(tmp_path / "cv"), "--master-port", "0",
                                     "--worker-port", "0", "--lm-port", "0", "--mount", str(mountpoint)), ready_prefix="mount=",
               timeout=90)
    try:
        (mountpoint / "hello.txt").write_bytes(b"through the mount")
        with CurvineClient((tmp_path / "cv" / "master.addr").read_text().strip()) as client:
            assert client.fs.stat("/hello.txt").size == len(b"through the mount")
    finally:
        up.process.send_signal(signal.SIGINT)
        assert up.process.wait(30) == 0
    assert not os.path.ismount(mountpoint), "up unmounts on Ctrl-C"


def test_help_lists_every_subcommand() -> None:
    out = subprocess.run([sys.executable, "-m", "curvine_py.cli.main", "--help"], check=False, capture_output=True,
                         text=True)
    for name in ("master", "worker", "up", "fs", "kv", "report", "mount", "bench"):
        assert name in out.stdout


SECRET = "s3cret-token-0123456789"


def _cmdlines(pid: int) -> dict[int, str]:
    """/proc/PID/cmdline of every descendant of `pid` (what any user on the host can read)."""
    import psutil
    lines = {}
    for child in psutil.Process(pid).children(recursive=True):
        try:
            lines[child.pid] = pathlib.Path(f"/proc/{child.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except FileNotFoundError:
            continue
    return lines


def test_up_passes_the_token_to_its_children_never_on_their_command_lines(tmp_path: pathlib.Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(SECRET + "\n")
    token_file.chmod(0o600)
    mountpoint = tmp_path / "mnt"
    up = start("up", curvine_command("up", "--data-dir", str(tmp_path / "cv"), "--master-port", "0",
                                     "--worker-port", "0", "--lm-port", "0", "--token-file", str(token_file),
                                     "--mount", str(mountpoint)),
               ready_prefix="mount=", timeout=90)
    try:
        lines = _cmdlines(up.process.pid)
        roles = {role for line in lines.values() for role in ("master", "worker", "mount")
                 if f"curvine_py.cli.main {role}" in line}
        assert roles == {"master", "worker", "mount"}, lines
        assert not [line for line in lines.values() if SECRET in line], lines
        assert SECRET not in "\n".join(up.tail), "the token is never logged"
        (mountpoint / "via-mount").write_bytes(b"authenticated")    # the mount got the token
        address = (tmp_path / "cv" / "master.addr").read_text().strip()
        with CurvineClient(address, token=SECRET) as client:
            assert client.fs.stat("/via-mount").size == len(b"authenticated")
        refused = cli("fs", "--master", address, "--token", "wrong", "--timeout", "2", "ls", "/")
        assert refused.returncode == 1 and b"curvine-py fs:" in refused.stderr, refused.stderr
        assert SECRET.encode() not in refused.stderr
        bad = tmp_path / "bad-token"
        bad.write_text("wrong\n")
        refused = cli("fs", "--master", address, "--token-file", str(bad), "--timeout", "2", "ls", "/")
        assert refused.returncode == 1, refused.stderr
        allowed = cli("fs", "--master", address, "--token-file", str(token_file), "ls", "/")
        assert allowed.returncode == 0 and b"via-mount" in allowed.stdout, allowed.stderr
    finally:
        up.process.send_signal(signal.SIGINT)
        assert up.process.wait(30) == 0
    assert SECRET not in "\n".join(up.tail)


def test_up_takes_the_token_from_the_environment_and_refuses_a_bad_token_file(tmp_path: pathlib.Path) -> None:
    up = start("up", curvine_command("up", "--data-dir", str(tmp_path / "cv"), "--master-port", "0",
                                     "--worker-port", "0", "--lm-port", "0"), ready_prefix="master=",
               timeout=60, env={"CURVINE_TOKEN": SECRET})
    try:
        assert not [line for line in _cmdlines(up.process.pid).values() if SECRET in line]
        refused = cli("kv", "--master", up.address, "--timeout", "2", "exists", "k", env={"CURVINE_TOKEN": "wrong"})
        assert refused.returncode == 1 and b"curvine-py kv:" in refused.stderr, refused.stderr
        assert cli("kv", "--master", up.address, "exists", "k", env={"CURVINE_TOKEN": SECRET}).returncode == 1, \
            "a miss (exit 1) with the right token..."
        put = cli("kv", "--master", up.address, "put", "k", "-", env={"CURVINE_TOKEN": SECRET}, stdin=b"v")
        assert put.returncode == 0, put.stderr
        assert cli("kv", "--master", up.address, "exists", "k", env={"CURVINE_TOKEN": SECRET}).returncode == 0
    finally:
        up.process.send_signal(signal.SIGINT)
        assert up.process.wait(30) == 0
    for content, message in (("", b"is empty"), ("two words", b"whitespace")):
        token_file = tmp_path / "token"
        token_file.write_text(content)
        result = cli("up", "--data-dir", str(tmp_path / "cv2"), "--token-file", str(token_file))
        assert result.returncode == 2 and message in result.stderr, result.stderr
    result = cli("up", "--data-dir", str(tmp_path / "cv2"), "--token-file", str(tmp_path / "missing"))
    assert result.returncode == 2 and b"cannot read the token file" in result.stderr, result.stderr
    result = cli("master", "--data-dir", str(tmp_path / "m"), "--port", "0", "--token", "a",
                 "--token-file", str(tmp_path / "missing"))
    assert result.returncode != 0 and b"not both" in result.stderr, result.stderr


def test_master_worker_and_mount_read_their_token_from_a_file(tmp_path: pathlib.Path) -> None:
    from curvine_py.core.errors import CurvineError
    token_file = tmp_path / "token"
    token_file.write_text(SECRET)
    token_file.chmod(0o600)
    started = []
    try:
        master = start("master", curvine_command("master", "--data-dir", str(tmp_path / "m"), "--port", "0",
                                                 "--token-file", str(token_file)), ready_prefix="master=")
        started.append(master)
        (tmp_path / "w").mkdir()
        started.append(start("worker", curvine_command("worker", "--master", master.address, "--data-dir",
                                                       str(tmp_path / "w"), "--port", "0",
                                                       "--token-file", str(token_file)), ready_prefix="worker="))
        (tmp_path / "mnt").mkdir()
        started.append(start("mount", curvine_command("mount", "--master", master.address, str(tmp_path / "mnt"),
                                                      "--token-file", str(token_file)), ready_prefix="mounted="))
        (tmp_path / "mnt" / "f").write_bytes(b"x" * 1000)
        assert (tmp_path / "mnt" / "f").read_bytes() == b"x" * 1000
        for process in started:
            cmdline = pathlib.Path(f"/proc/{process.process.pid}/cmdline").read_bytes()
            assert SECRET.encode() not in cmdline
        with CurvineClient(master.address, token="wrong", rpc_timeout_s=2) as client:
            try:
                client.fs.stat("/f")
            except CurvineError as exc:
                assert exc.errno in (errno.EACCES, errno.EPERM), exc
            else:
                raise AssertionError("a wrong token was accepted")
    finally:
        for process in reversed(started):
            assert process.stop() == 0
    assert not [line for p in started for line in p.tail if SECRET in line], "the token is never logged"
