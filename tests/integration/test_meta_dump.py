"""`curvine-py meta dump` / `meta load` on a real cluster: the namespace of a master after activity
(policies, a quota, multi-block files on two workers, renames, an unlink, xattrs, a symlink) is
dumped from its data dir, loaded into a new one, and a master started there (on the old port, so
the workers find it) serves every file byte for byte from the blocks the workers still hold, with a
clean fsck. A truncated dump and a non-empty target are refused and change nothing."""
from __future__ import annotations

import json
import os
import pathlib
import pty
import subprocess
import time

from curvine_py.core.domain import Policy, StorageClass
from curvine_py.master.namespace import Namespace
from curvine_py.master.types import ROOT_INO, FileType
from curvine_py.procs import curvine_command, start
from tests.harness import FAST_TIMERS, Cluster, random_bytes, wait_until
from tests.integration.test_cli import cli

MiB = 1 << 20


def test_dump_load_and_serve_from_the_loaded_namespace(tmp_path: pathlib.Path) -> None:
    dump = tmp_path / "ns.dump"
    with Cluster(tmp_path / "c", workers=2) as cluster:
        client = cluster.client()
        fs = client.fs
        fs.mkdir("/durable")
        fs.set_policy("/durable", Policy(storage_class=StorageClass.DURABLE, replicas=2, block_size=MiB))
        fs.set_quota("/durable", max_bytes=1 << 30, max_inodes=1000)
        files = {f"/durable/f{i}": random_bytes(MiB * (i % 3) + 777 * i, seed=i) for i in range(12)}
        for path, data in files.items():
            with fs.open(path, "wb") as f:
                f.write(data)
        fs.rename("/durable/f0", "/durable/renamed")
        files["/durable/renamed"] = files.pop("/durable/f0")
        fs.rm("/durable/f1")
        del files["/durable/f1"]
        fs.symlink("durable/f2", "/link")
        fs.mkdir("/empty/deeper", parents=True)
        client.master.setxattr(fs.stat("/durable/f3").ino, "user.tag", b"\x00\xffkept")
        assert cluster.master is not None
        old_port = cluster.master_address.rsplit(":", 1)[1]
        assert cluster.master.stop() == 0

        result = cli("meta", "dump", "--data-dir", str(tmp_path / "c" / "master"), str(dump))
        assert result.returncode == 0, result.stderr
        assert result.stdout == b""                             # nothing on stdout in a pipe
        assert result.stderr.decode().count("\n") == 1 and b"dumped" in result.stderr

        # A truncated dump is refused and leaves nothing where it was to go.
        cut = tmp_path / "cut.dump"
        cut.write_bytes(dump.read_bytes()[:dump.stat().st_size * 2 // 3])
        bad = cli("meta", "load", "--data-dir", str(tmp_path / "bad"), str(cut))
        assert bad.returncode == 1 and b"truncated" in bad.stderr and b"EIO" in bad.stderr
        assert not (tmp_path / "bad" / "meta.db").exists()
        # The source itself holds a namespace: refused without --force.
        busy = cli("meta", "load", "--data-dir", str(tmp_path / "c" / "master"), str(dump))
        assert busy.returncode == 1 and b"--force" in busy.stderr

        new_dir = tmp_path / "loaded"
        loaded = cli("meta", "load", "--data-dir", str(new_dir), str(dump))
        assert loaded.returncode == 0, loaded.stderr
        started_ms = time.time_ns() // 1_000_000
        cluster.master = start("master", curvine_command(
            "master", "--data-dir", str(new_dir), "--port", old_port, *FAST_TIMERS), ready_prefix="master=")
        reader = cluster.client()
        # The loaded worker rows are live at start (as after any restart); wait until both workers
        # have really heartbeated to this master, not just been restored.
        wait_until(lambda: sum(w.live and w.last_heartbeat_ms >= started_ms
                               for w in reader.master.membership().workers) == 2, 15, "2 workers beating")
        for path, data in files.items():
            with reader.fs.open(path, "rb") as f:
                assert f.read() == data, path
        assert not reader.fs.exists("/durable/f1")
        assert reader.master.readlink(reader.fs.stat("/link", follow_symlinks=False).ino) == "durable/f2"
        assert reader.master.getxattr(reader.fs.stat("/durable/f3").ino, "user.tag") == b"\x00\xffkept"
        quota = reader.fs.quota("/durable")
        assert (quota.max_inodes, quota.used_inodes) == (1000, len(files))
        assert reader.fs.exists("/empty/deeper")
        fsck = cli("fsck", "--master", cluster.master_address, "--json")
        assert fsck.returncode == 0, fsck.stdout + fsck.stderr
        assert json.loads(fsck.stdout)["clean"] is True
        # New files go on from the loaded counters (no inode or block id reused).
        with reader.fs.open("/durable/after", "wb") as f:
            f.write(b"after the load")
        assert reader.fs.stat("/durable/after").ino > max(reader.fs.stat(p).ino for p in files)


def test_a_progress_bar_on_a_terminal_only(tmp_path: pathlib.Path) -> None:
    (tmp_path / "d").mkdir()
    ns = Namespace(str(tmp_path / "d" / "meta.db"))
    for i in range(50):
        ns.create(ROOT_INO, f"f{i}", FileType.REGULAR)
    ns.close()
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(curvine_command("meta", "dump", "--data-dir", str(tmp_path / "d"),
                                              str(tmp_path / "x.dump")),
                              stdout=subprocess.PIPE, stderr=follower, timeout=60, check=False)
        os.close(follower)
        shown = b""
        try:
            while chunk := os.read(leader, 65536):
                shown += chunk
        except OSError:       # EIO once the pty's other end is closed and drained
            pass
    finally:
        os.close(leader)
    assert proc.returncode == 0 and proc.stdout == b""
    assert b"\x1b[" in shown and b"dump" in shown and b"dumped" in shown   # the bar, then the summary
    piped = cli("meta", "dump", "--data-dir", str(tmp_path / "d"), str(tmp_path / "y.dump"))
    assert b"\x1b[" not in piped.stderr and piped.stderr.count(b"\n") == 1


def test_dump_to_a_pipe_and_load_from_one_by_url(tmp_path: pathlib.Path) -> None:
    (tmp_path / "d").mkdir()
    source = Namespace(str(tmp_path / "d" / "meta.db"))
    for i in range(20):
        source.create(ROOT_INO, f"f{i}", FileType.REGULAR)
    dumped = cli("meta", "dump", "--data-dir", str(tmp_path / "d"), "-")
    assert dumped.returncode == 0 and dumped.stdout.startswith(b"\x04\x22\x4d\x18")   # an lz4 frame
    target = tmp_path / "other" / "ns.db"
    loaded = cli("meta", "load", "--meta", f"sqlite://{target}", "-", stdin=dumped.stdout)
    assert loaded.returncode == 0, loaded.stderr
    copy = Namespace(str(target))
    assert [e.name for e in copy.readdir(ROOT_INO)[0]] == sorted(f"f{i}" for i in range(20))
    assert copy.cluster_id == source.cluster_id and copy.check() == []
    # Neither side named, or a missing dump: a clear error, exit 1, nothing created.
    nowhere = cli("meta", "dump", "-")
    assert nowhere.returncode == 1 and b"--data-dir DIR" in nowhere.stderr
    missing = cli("meta", "load", "--data-dir", str(tmp_path / "n"), str(tmp_path / "no.dump"))
    assert missing.returncode == 1 and b"no dump file" in missing.stderr
    assert not (tmp_path / "n" / "meta.db").exists()
    # A PostgreSQL server that is not there: a clear error naming it, exit 1, no dump on stdout.
    pg = cli("meta", "dump", "--meta", "postgresql://u@127.0.0.1:9/db", "-")
    assert pg.returncode == 1 and b"cannot connect to the metadata database postgresql://u@127.0.0.1:9/db" \
        in pg.stderr and pg.stdout == b"", pg.stderr
