"""`curvine-py load LOCAL_PATH REMOTE_DIR` against a real cluster: a nested tree lands bit-exact,
a rerun uploads nothing (counted in its --json summary), a same-size file with other bytes is
uploaded again, symlinks and fifos are skipped with a note, bad arguments are clear errors that
change nothing, a worker killed mid-load names the failed files (exit 1) and leaves nothing
half-visible, and the rerun completes. Progress on a pseudo-terminal, one line in a pipe."""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from curvine_py.client import CurvineClient
from curvine_py.procs import curvine_command
from tests.harness import Cluster, random_bytes, wait_until
from tests.integration.test_cli import cli
from tests.integration.test_cli_fs_put import run_on_a_pty

BLOCK = 1 << 20   # small blocks: a 2.5 MiB file has three, each with its own checksum


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    with Cluster(tmp_path / "cluster", workers=1, master_args=["--block-size", str(BLOCK)]) as c:
        yield c


def tree(root: pathlib.Path) -> dict[str, bytes]:
    """A model-like tree: nested directories, an empty file, a multi-block file, an empty dir."""
    files = {"config.json": b'{"layers": 2}', "empty": b"",
             "weights/shard-0.bin": random_bytes(BLOCK * 5 // 2, seed=1),
             "weights/shard-1.bin": random_bytes(BLOCK + 7, seed=2),
             "tokenizer/sub/vocab.txt": b"a\nb\n" * 1000}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "empty-dir").mkdir()
    return files


def load(cluster: Cluster, *args: str) -> tuple[subprocess.CompletedProcess[bytes], dict[str, object]]:
    done = cli("load", "--master", cluster.master_address, *args, "--json")
    return done, json.loads(done.stdout) if done.stdout.strip() else {}


def remote_tree(client: CurvineClient, root: str) -> dict[str, bytes]:
    out = {}
    for entry in client.fs.walk(root):
        if entry.kind == "file":
            with client.fs.open(entry.path) as handle:
                out[entry.path[len(root) + 1:]] = handle.read()
    return out


def test_load_twice_copies_once_and_a_changed_same_size_file_again(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    local = tmp_path / "llama"
    files = tree(local)
    first, summary = load(cluster, str(local), "/models/llama")
    assert first.returncode == 0, first.stderr
    assert summary["copied"] == len(files) and summary["unchanged"] == 0 and summary["failed"] == []
    assert summary["copied_bytes"] == sum(len(d) for d in files.values())
    client = cluster.client()
    assert remote_tree(client, "/models/llama") == files
    assert client.fs.stat("/models/llama/empty-dir").is_dir

    again, summary = load(cluster, str(local), "/models/llama")
    assert again.returncode == 0 and summary["copied"] == 0 and summary["unchanged"] == len(files), summary

    # Same size, one byte different in the last block of a multi-block file: found and sent again.
    shard = local / "weights/shard-0.bin"
    changed = bytearray(shard.read_bytes())
    changed[-1] ^= 0xFF
    shard.write_bytes(changed)
    files["weights/shard-0.bin"] = bytes(changed)
    third, summary = load(cluster, str(local), "/models/llama")
    assert third.returncode == 0 and summary["copied_files"] == ["weights/shard-0.bin"], summary
    assert summary["unchanged"] == len(files) - 1
    assert remote_tree(client, "/models/llama") == files

    forced, summary = load(cluster, "--force", str(local), "/models/llama")
    assert forced.returncode == 0 and summary["copied"] == len(files)

    # A single file goes into REMOTE_DIR under its own name.
    single, summary = load(cluster, str(local / "config.json"), "/models/one")
    assert single.returncode == 0 and summary["copied_files"] == ["config.json"]
    assert client.fs.stat("/models/one/config.json").size == len(files["config.json"])


def test_symlinks_and_special_files_are_skipped_with_a_note(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    local = tmp_path / "t"
    (local / "d").mkdir(parents=True)
    (local / "d" / "real.bin").write_bytes(b"x" * 100)
    (local / "link.bin").symlink_to(local / "d" / "real.bin")
    (local / "dirlink").symlink_to(local / "d")
    os.mkfifo(local / "pipe")
    done, summary = load(cluster, str(local), "/t")
    assert done.returncode == 0, done.stderr
    assert summary["copied_files"] == ["d/real.bin"]
    assert {s["path"]: s["reason"] for s in summary["skipped"]} == {   # type: ignore[attr-defined]
        "dirlink": "a symlink (not followed)", "link.bin": "a symlink (not followed)", "pipe": "a fifo"}
    assert b"note: skipped link.bin: a symlink (not followed)" in done.stderr
    client = cluster.client()
    assert sorted(e.path for e in client.fs.walk("/t")) == ["/t/d", "/t/d/real.bin"]


def test_bad_arguments_are_clear_errors_that_change_nothing(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    local = tmp_path / "t"
    tree(local)
    client = cluster.client()
    client.fs.mkdir("/m")
    with client.fs.open("/m/file", "wb") as handle:
        handle.write(b"keep")
    onto_file = cli("load", "--master", cluster.master_address, str(local), "/m/file")
    assert onto_file.returncode == 1 and b"REMOTE_DIR /m/file is a file" in onto_file.stderr
    traversal = cli("load", "--master", cluster.master_address, str(local), "/m/../../etc")
    assert traversal.returncode == 1 and b"contains '..'" in traversal.stderr
    missing = cli("load", "--master", cluster.master_address, str(tmp_path / "nope"), "/m/x")
    assert missing.returncode == 1 and b"cannot read" in missing.stderr
    os.mkfifo(tmp_path / "fifo")
    fifo = cli("load", "--master", cluster.master_address, str(tmp_path / "fifo"), "/m/x")
    assert fifo.returncode == 1 and b"is a fifo" in fifo.stderr
    jobs = cli("load", "--master", cluster.master_address, "-j", "0", str(local), "/m/x")
    assert jobs.returncode == 2 and b"--jobs must be at least 1" in jobs.stderr
    assert sorted(e.path for e in client.fs.walk("/")) == ["/m", "/m/file"], "nothing was created"
    with client.fs.open("/m/file") as handle:
        assert handle.read() == b"keep"


def test_a_worker_killed_mid_load_names_the_failed_files_and_the_rerun_completes(
        cluster: Cluster, tmp_path: pathlib.Path) -> None:
    local = tmp_path / "many"
    files = {f"part-{i:02d}/w.bin": random_bytes(BLOCK * 3, seed=i) for i in range(30)}
    for rel, data in files.items():
        (local / rel).parent.mkdir(parents=True)
        (local / rel).write_bytes(data)
    client = cluster.client()
    # One file at a time, so the kill lands between the first files and the last.
    proc = subprocess.Popen(curvine_command("load", "--master", cluster.master_address, "-j", "1", "--json",
                                            str(local), "/many"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def loaded() -> int:
        try:
            return sum(1 for e in client.fs.walk("/many") if e.kind == "file" and not e.path.rsplit("/", 1)[1].startswith("."))
        except Exception:   # noqa: BLE001 - /many not made yet
            return 0

    wait_until(lambda: loaded() >= 3, 30, "three files loaded")
    cluster.kill_worker(0)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    summary = json.loads(out)
    failed = {f["path"] for f in summary["failed"]}
    assert failed and len(failed) + summary["copied"] == len(files), summary
    for rel in failed:
        assert f"failed: {rel}: ".encode() in err, err
    # Nothing half-visible: no temporary names, and each failed file absent (the master is up).
    names = [e.path for e in client.fs.walk("/many")]
    assert not [n for n in names if n.rsplit("/", 1)[1].startswith(".")], names
    assert not [rel for rel in failed if f"/many/{rel}" in names]
    assert sorted(n[len("/many/"):] for n in names if n.endswith(".bin")) == sorted(summary["copied_files"])

    cluster.restart_worker(0)
    cluster.wait_for_live_workers(1)
    rerun, summary = load(cluster, str(local), "/many")
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(summary["copied_files"]) == sorted(failed) and summary["unchanged"] == len(files) - len(failed)
    assert remote_tree(client, "/many") == files


def test_progress_on_a_terminal_and_one_line_in_a_pipe(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    local = tmp_path / "t"
    files = tree(local)
    code, shown = run_on_a_pty(curvine_command("load", "--master", cluster.master_address, str(local), "/p"))
    assert code == 0, shown
    assert f"load {len(files)}/{len(files)} files".encode() in shown and "━".encode() in shown, shown
    piped = cli("load", "--master", cluster.master_address, str(local), "/p")
    assert piped.returncode == 0 and piped.stderr == b""
    lines = piped.stdout.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"load {local} -> /p: uploaded 0 files (0 B), {len(files)} unchanged")


def test_a_255_byte_name_loads_and_comes_back(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """The temporary names of put and get are cut to fit: a name of NAME_MAX bytes copies both ways."""
    local = tmp_path / "t"
    local.mkdir()
    name = "é" * 127 + "x"   # 255 bytes in UTF-8
    (local / name).write_bytes(b"long")
    done, summary = load(cluster, str(local), "/long")
    assert done.returncode == 0 and summary["copied_files"] == [name], done.stderr
    back = cli("fs", "--master", cluster.master_address, "get", "-r", "/long", str(tmp_path / "back"))
    assert back.returncode == 0, back.stderr
    assert (tmp_path / "back" / name).read_bytes() == b"long"


@contextlib.contextmanager
def interruptible_children() -> Iterator[None]:
    """Children started inside take SIGINT as a terminal's foreground job does. Why: a test run
    started in the background of a non-interactive shell (`nohup pytest ... &`, a CI job) has
    SIGINT ignored, as POSIX asks for background jobs, and an ignored signal stays ignored across
    fork and exec, so the load would rightly ignore the test's Ctrl-C (it did, in full runs: every
    file uploaded, exit 0). A handled signal is reset to its default at exec, so handling it here
    while the child starts gives the child the default."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_after_the_files_in_flight_and_the_rerun_resumes(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    local = tmp_path / "many"
    files = {f"f-{i:03d}.bin": random_bytes(4096, seed=100 + i) for i in range(300)}
    local.mkdir()
    for rel, data in files.items():
        (local / rel).write_bytes(data)
    client = cluster.client()
    with interruptible_children():
        proc = subprocess.Popen(curvine_command("load", "--master", cluster.master_address, "-j", "1",
                                                str(local), "/many"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def loaded() -> int:
        try:
            return sum(1 for e in client.fs.ls("/many") if not e.path.rsplit("/", 1)[1].startswith("."))
        except Exception:   # noqa: BLE001 - /many not made yet
            return 0

    wait_until(lambda: loaded() >= 2, 30, "two files loaded")
    # The master frozen, no file can finish, so the Ctrl-C surely comes mid-run: a load that then
    # ends with every file and exit 0 did not act on it. The load itself keeps running, so the
    # kernel hands the signal to its main thread as it would a user's.
    assert cluster.master is not None
    master = cluster.master.process
    before = loaded()
    master.send_signal(signal.SIGSTOP)
    try:
        # Far from its end a moment ago (one file in flight), the load cannot have ended since.
        assert before <= len(files) - 10 and proc.poll() is None, f"the load was at its end ({before} files)"
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)   # the signal's handling needs no master; a late one would only stop later
    finally:
        master.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert b"interrupted; the same command again uploads only what is not there yet" in err
    names = [e.path.rsplit("/", 1)[1] for e in client.fs.ls("/many")]
    assert not [n for n in names if n.startswith(".")], names   # the file in flight finished or was taken back
    assert len(names) <= before + 2, (before, names)   # one done before the freeze, the one in flight
    rerun, summary = load(cluster, str(local), "/many")
    assert rerun.returncode == 0 and summary["unchanged"] == len(names)
    assert summary["copied"] == len(files) - len(names)
    assert remote_tree(client, "/many") == files
