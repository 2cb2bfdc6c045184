"""CreateMany against a real master: each create answered as if alone, in order, one failing does
not stop the others, every acknowledged create survives kill -9, oversized calls are refused, and
a leased directory is recalled first (as for Create)."""
from __future__ import annotations

import errno
import pathlib

import pytest

from curvine_py.client.master import MasterClient
from curvine_py.core.domain import Attr, FileType, NewNode
from curvine_py.core.errors import AlreadyExists, CurvineError, InvalidArgument, NotFound
from curvine_py.master.service import MAX_CREATE_MANY
from tests.harness import Cluster


def _file(parent: int, name: str, *, exclusive: bool = True) -> NewNode:
    return NewNode(parent, name, FileType.REGULAR, 0o640, uid=1000, gid=1000, exclusive=exclusive)


def test_create_many(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path / "c", workers=0, master_args=["--dir-lease-ms", "1000"]) as cluster:
        a, b = MasterClient(cluster.master_address), MasterClient(cluster.master_address)
        d = a.create(NewNode(1, "d", FileType.DIRECTORY, 0o755)).ino
        a.create(_file(d, "exists"))
        results = a.create_many([_file(d, "one"), _file(d, "exists"), _file(d, "bad/name"),
                                 _file(d, "exists", exclusive=False), _file(9999, "orphan"), _file(d, "two")])
        one, dup, bad, reopened, orphan, two = results
        assert isinstance(one, Attr) and one.mode & 0o777 == 0o640 and one.uid == 1000
        assert isinstance(dup, AlreadyExists) and dup.errno == errno.EEXIST
        assert isinstance(bad, CurvineError) and bad.errno == errno.EINVAL
        assert isinstance(reopened, Attr) and reopened.ino == a.lookup(d, "exists").ino, "O_CREAT without O_EXCL"
        assert isinstance(orphan, NotFound)
        assert isinstance(two, Attr) and two.ino > one.ino, "in order"
        assert sorted(e.name for e in a.readdir(d, "", 100).entries) == ["exists", "one", "two"]

        with pytest.raises(InvalidArgument):
            a.create_many([_file(d, f"x{i}") for i in range(MAX_CREATE_MANY + 1)])
        assert a.lookup(d, "one").ino == one.ino
        with pytest.raises(NotFound):
            a.lookup(d, "x0")

        # B leases a directory; A's CreateMany there waits for B's lease to run out.
        e = b.create(NewNode(1, "e", FileType.DIRECTORY, 0o755)).ino
        assert b.acquire_dir_lease(e).granted
        created = a.create_many([_file(e, "p"), _file(e, "q")])
        assert list(b.renew_dir_leases([e]).kept) == [], "B's lease was recalled first"
        assert all(isinstance(r, Attr) for r in created)

        cluster.restart_master()       # kill -9: every acknowledged create is still there
        c = MasterClient(cluster.master_address)
        assert {n: c.lookup(d, n).ino for n in ("one", "two")} == {"one": one.ino, "two": two.ino}
        assert c.lookup(e, "q").ino == created[1].ino
        for client in (a, b, c):
            client.close()
