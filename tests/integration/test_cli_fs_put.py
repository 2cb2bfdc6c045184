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


def _tree(root: pathlib.Path) -> dict[str, bytes]:
    files = {"a.bin": random_bytes(3 << 20, seed=3), "sub/b.bin": b"b" * 10, "sub/deeper/c": b"", "d/e": b"e"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "link").symlink_to(root / "a.bin")
    return files


def _local_files(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def test_put_and_get_recursive_as_cp_r(cluster1: Cluster, tmp_path: pathlib.Path) -> None:
    master = ["--master", cluster1.master_address]
    src = tmp_path / "llama"
    files = _tree(src)
    assert cli("fs", *master, "mkdir", "/models").returncode == 0
    # Into an existing directory: a copy named after the source.
    put = cli("fs", *master, "put", "-r", str(src), "/models")
    assert put.returncode == 0, put.stderr
    assert put.stdout.decode().startswith(f"put {src} -> /models/llama: copied 4 files (3.0 MiB), 0 failed, 1 skipped")
    assert b"note: skipped link: a symlink (not followed)" in put.stderr
    # Onto a name that does not exist: that name becomes the copy; its parent must exist unless -p.
    refused = cli("fs", *master, "put", "-r", str(src), "/nope/copy")
    assert refused.returncode == 1 and b"directory /nope does not exist" in refused.stderr and b"put -p" in refused.stderr
    made = cli("fs", *master, "put", "-r", "-p", "-j", "2", str(src), "/nope/copy")
    assert made.returncode == 0, made.stderr
    onto_file = cli("fs", *master, "put", "-r", str(src), "/models/llama/a.bin")
    assert onto_file.returncode == 1 and b"is a file" in onto_file.stderr
    without_r = cli("fs", *master, "put", str(src), "/models/x")
    assert without_r.returncode == 1 and b"put -r copies a directory" in without_r.stderr

    out = tmp_path / "out"
    out.mkdir()
    got = cli("fs", *master, "get", "-r", "/models/llama", str(out))
    assert got.returncode == 0, got.stderr
    assert got.stdout.decode().startswith(f"get /models/llama -> {out / 'llama'}: copied 4 files")
    assert _local_files(out / "llama") == files
    got = cli("fs", *master, "get", "-r", "/nope/copy", str(tmp_path / "fresh"))
    assert got.returncode == 0 and _local_files(tmp_path / "fresh") == files
    assert cli("fs", *master, "get", "/models/llama", str(tmp_path / "x")).stderr.endswith(
        b"get -r copies a directory)\n")
    no_parent = cli("fs", *master, "get", "-r", "/models/llama", str(tmp_path / "no" / "where"))
    assert no_parent.returncode == 1 and b"does not exist" in no_parent.stderr
    with CurvineClient(cluster1.master_address) as client:
        assert {e.path for e in client.fs.walk("/models/llama") if e.kind == "file"} == \
            {f"/models/llama/{rel}" for rel in files}


def test_get_recursive_never_writes_through_a_local_symlink(cluster1: Cluster, tmp_path: pathlib.Path) -> None:
    """A local copy whose `sub` is a symlink out of it: the remote sub/ is refused there and none of
    its files or directories is written (through the link); the rest of the tree is copied."""
    master = ["--master", cluster1.master_address]
    src = tmp_path / "src"
    files = _tree(src)
    assert cli("fs", *master, "put", "-r", str(src), "/t").returncode == 0
    dest = tmp_path / "dest"
    (dest / "t").mkdir(parents=True)   # an existing copy, whose sub/ is a link out of it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (dest / "t" / "sub").symlink_to(elsewhere)
    got = cli("fs", *master, "get", "-r", "/t", str(dest))   # dest exists: into dest/t
    assert got.returncode == 1
    assert b"failed: sub/: exists and is not a directory (a symlink is not followed)" in got.stderr
    assert b"failed: sub/b.bin: not copied" in got.stderr and b"failed: sub/deeper/c: not copied" in got.stderr
    assert list(elsewhere.iterdir()) == [], "nothing written through the symlink"
    assert (dest / "t" / "a.bin").read_bytes() == files["a.bin"]


def test_tree_progress_on_a_terminal(cluster1: Cluster, tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    _tree(src)
    code, shown = run_on_a_pty(curvine_command("fs", "--master", cluster1.master_address, "put", "-r", str(src), "/t"))
    assert code == 0 and b"put 4/4 files" in shown and "━".encode() in shown, shown
    code, shown = run_on_a_pty(curvine_command("fs", "--master", cluster1.master_address, "get", "-r", "/t",
                                               str(tmp_path / "back")))
    assert code == 0 and b"get 4/4 files" in shown, shown
