"""`fs put` / `fs get` as people expect from `cp` and `hdfs dfs -put`: a missing parent directory
is an error that says so and suggests -p, `-p` creates the parents, bad local input is a clear
error that changes nothing; a progress bar on a terminal (a real pseudo-terminal), none in a pipe."""
from __future__ import annotations

import os
import pathlib
import pty
import subprocess

from curvine_py.client import CurvineClient
from curvine_py.procs import curvine_command
from tests.harness import Cluster, random_bytes
from tests.integration.test_cli import cli


def test_put_into_a_missing_directory_says_so_and_p_creates_it(cluster1: Cluster, tmp_path: pathlib.Path) -> None:
    master = ["--master", cluster1.master_address]
    local = tmp_path / "w.bin"
    local.write_bytes(random_bytes(100_000, seed=1))
    refused = cli("fs", *master, "put", str(local), "/models/llama/w.bin")
    assert refused.returncode == 1
    assert b"directory /models/llama does not exist" in refused.stderr and b"put -p" in refused.stderr
    with CurvineClient(cluster1.master_address) as client:
        assert not client.fs.exists("/models"), "a refused put creates nothing"
        made = cli("fs", *master, "put", "-p", str(local), "/models/llama/w.bin")
        assert made.returncode == 0, made.stderr
        assert made.stdout == b"100000 bytes -> /models/llama/w.bin\n" and made.stderr == b""
        assert client.fs.stat("/models/llama").is_dir
        with client.fs.open("/models/llama/w.bin") as handle:
            assert handle.read() == local.read_bytes()
        again = cli("fs", *master, "put", "-p", str(local), "/models/llama/w2.bin")   # parents exist: fine
        assert again.returncode == 0 and client.fs.stat("/models/llama/w2.bin").size == 100_000
        missing = cli("fs", *master, "put", str(tmp_path / "nope"), "/models/x")
        assert missing.returncode == 1 and b"cannot read" in missing.stderr and b"No such file" in missing.stderr
        directory = cli("fs", *master, "put", str(tmp_path), "/models/x")
        assert directory.returncode == 1 and b"is a directory" in directory.stderr
        assert not client.fs.exists("/models/x"), "bad local input changes nothing"


def run_on_a_pty(argv: list[str]) -> tuple[int, bytes]:
    """Runs with stdout and stderr on a pseudo-terminal; returns the exit code and all it wrote."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdout=follower, stderr=follower, stdin=subprocess.DEVNULL,
                            env={**os.environ, "COLUMNS": "120", "TERM": "xterm"})
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:   # EIO: the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    return proc.wait(60), output


def test_progress_on_a_terminal_and_none_in_a_pipe(cluster1: Cluster, tmp_path: pathlib.Path) -> None:
    master = ["--master", cluster1.master_address]
    local = tmp_path / "big.bin"
    local.write_bytes(random_bytes(40 << 20, seed=2))
    code, shown = run_on_a_pty(curvine_command("fs", *master, "put", str(local), "/big.bin"))
    assert code == 0, shown
    assert b"put big.bin" in shown and "━".encode() in shown and b"40.0/40.0 MiB" in shown, shown
    code, shown = run_on_a_pty(curvine_command("fs", *master, "get", "/big.bin", str(tmp_path / "back.bin")))
    assert code == 0 and b"get /big.bin" in shown and b"40.0/40.0 MiB" in shown, shown
    assert (tmp_path / "back.bin").read_bytes() == local.read_bytes()

    piped = cli("fs", *master, "put", str(local), "/big2.bin")
    assert piped.returncode == 0 and piped.stderr == b"" and piped.stdout == f"{40 << 20} bytes -> /big2.bin\n".encode()
    piped = cli("fs", *master, "get", "/big2.bin", str(tmp_path / "back2.bin"))
    assert piped.returncode == 0 and piped.stderr == b"" and piped.stdout == f"{40 << 20} bytes -> {tmp_path / 'back2.bin'}\n".encode()
