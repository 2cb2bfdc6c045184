"""Directory quotas against real master and worker processes: EDQUOT on create and on a write past
the byte limit (the file keeps its committed bytes), raising the quota lets the write through, the
quota survives a master restart, statfs of a subtree reports it, and the CLI shows and sets it."""
from __future__ import annotations

import errno
import json
import pathlib

import pytest

from curvine_py.client.types import Quota
from curvine_py.core.domain import Policy, StorageClass
from curvine_py.core.errors import QuotaExceeded
from tests.harness import Cluster, random_bytes
from tests.integration.test_cli import cli

MiB = 1 << 20


def test_quota_enforced_through_the_library_and_kept_across_a_restart(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1) as cluster:
        client = cluster.client()
        fs = client.fs
        fs.mkdir("/q")
        fs.set_policy("/q", Policy(storage_class=StorageClass.DURABLE, block_size=MiB))
        fs.set_quota("/q", max_bytes=3 * MiB, max_inodes=3)
        old = random_bytes(2 * MiB, seed=1)
        with fs.open("/q/a", "wb") as f:
            f.write(old)
        assert fs.quota("/q").used_bytes == 2 * MiB

        # a write past the limit fails with EDQUOT; the file keeps its committed bytes
        f = fs.open("/q/a", "ab")
        with pytest.raises(QuotaExceeded) as raised:
            f.write(random_bytes(2 * MiB, seed=2))
            f.close()
        assert raised.value.errno == errno.EDQUOT
        with pytest.raises(QuotaExceeded):
            f.close()
        assert fs.stat("/q/a").size == 2 * MiB
        with fs.open("/q/a") as g:
            assert g.read() == old

        # raising the quota lets the same write succeed
        fs.set_quota("/q", max_bytes=8 * MiB, max_inodes=3)
        more = random_bytes(2 * MiB, seed=3)
        with fs.open("/q/a", "ab") as f:
            f.write(more)
        with fs.open("/q/a") as g:
            assert g.read() == old + more

        # the inode limit: creates fail with EDQUOT and leave nothing
        fs.mkdir("/q/d")
        with fs.open("/q/d/b", "wb") as f:
            f.write(b"x")
        with pytest.raises(QuotaExceeded):
            fs.open("/q/c", "wb")
        with pytest.raises(QuotaExceeded):
            fs.mkdir("/q/d/e")
        assert sorted(e.path for e in fs.ls("/q")) == ["/q/a", "/q/d"]
        assert fs.quota("/q") == Quota(8 * MiB, 3, 4 * MiB + 1, 3)

        # statfs of the subtree reports the quota; of the root, the cluster
        sub = fs.df("/q/d")
        assert (sub.capacity, sub.used, sub.available) == (8 * MiB, 4 * MiB + 1, 4 * MiB - 1)
        assert (sub.files, sub.max_files) == (3, 3)
        assert fs.df("/q/a").capacity == 8 * MiB          # a file: its directory's quota
        whole = fs.df("/")
        assert whole.capacity > 8 * MiB and whole.max_files == 0

        cluster.restart_master()
        cluster.wait_for_live_workers(1)
        fresh = cluster.client()
        q = fresh.fs.quota("/q")
        assert (q.max_bytes, q.max_inodes, q.used_bytes, q.used_inodes) == (8 * MiB, 3, 4 * MiB + 1, 3)
        with pytest.raises(QuotaExceeded):
            fresh.fs.mkdir("/q/again")
        cluster.wait_for_live_workers(1)
        fsck = cli("fsck", "--master", cluster.master_address)      # the counters match a recount
        assert fsck.returncode == 0, fsck.stdout.decode() + fsck.stderr.decode()


def test_quota_cli_du_df_and_report(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1) as cluster:
        master = ["--master", cluster.master_address]
        client = cluster.client()
        client.fs.mkdir("/vol")
        with client.fs.open("/vol/f", "wb") as f:
            f.write(random_bytes(MiB, seed=4))
        shown = cli("fs", *master, "quota", "/vol")
        assert shown.returncode == 0
        assert shown.stdout.decode().strip() == "/vol: bytes 1.0 MiB/unlimited  inodes 1/unlimited"
        set_ = cli("fs", *master, "quota", "/vol", "--bytes", "10MiB", "--inodes", "5")
        assert set_.stdout.decode().strip() == "/vol: bytes 1.0 MiB/10.0 MiB  inodes 1/5"
        # one option keeps the other limit
        assert cli("fs", *master, "quota", "/vol", "--inodes", "2").stdout.decode().strip() == \
            "/vol: bytes 1.0 MiB/10.0 MiB  inodes 1/2"
        du = cli("fs", *master, "du", "/vol").stdout.decode().split("\t")
        assert du[:3] == [str(MiB), "/vol", "1 inodes"]
        assert du[3].strip() == "quota bytes 1.0 MiB/10.0 MiB inodes 1/2"
        df = cli("fs", *master, "df", "/vol").stdout.decode()
        assert "capacity 10.0 MiB" in df and "files 1/2" in df
        report = cli("report", *master).stdout.decode()
        assert "quotas 1" in report and "/vol" in report
        quotas = json.loads(cli("report", *master, "--json").stdout)["quotas"]
        assert [(q["path"], int(q["maxBytes"]), int(q["maxInodes"])) for q in quotas] == [("/vol", 10 * MiB, 2)]
        # bad input: a clear error, exit 1, nothing changed
        bad = cli("fs", *master, "quota", "/vol/f", "--bytes", "1MiB")
        assert bad.returncode == 1 and b"ENOTDIR" in bad.stderr
        bad = cli("fs", *master, "quota", "/vol", "--inodes", "-1")
        assert bad.returncode == 1 and b"EINVAL" in bad.stderr
        full = cli("fs", *master, "mkdir", "/vol/d")
        assert full.returncode == 0
        full = cli("fs", *master, "mkdir", "/vol/e")
        assert full.returncode == 1 and b"EDQUOT" in full.stderr
        # both limits 0 removes the quota
        cli("fs", *master, "quota", "/vol", "--bytes", "0", "--inodes", "0")
        assert "quotas" not in cli("report", *master).stdout.decode()
