"""A create's block size, from the nearest directory policy at any depth: the general path on SQLite,
curvine_create's walk on PostgreSQL (store/pgfuncs.py). Both engines run every test."""
from __future__ import annotations

import pytest

from curvine_py.master.namespace import Namespace
from curvine_py.master.types import FileType, Policy
from tests.unit.test_master_support import MiB, mkdir, mkfile

pytestmark = pytest.mark.usefixtures("meta_engine")


def test_a_file_takes_the_block_size_of_the_nearest_policy_at_any_depth(ns: Namespace) -> None:
    top = mkdir(ns, "top")
    mid = mkdir(ns, "mid", top.ino)
    low = mkdir(ns, "low", mid.ino)
    assert mkfile(ns, "f", top.ino).block_size == 4 * MiB         # the grandparent is the root
    ns.set_policy("/top", Policy(block_size=MiB))
    assert mkfile(ns, "g", top.ino).block_size == MiB             # the parent's own
    assert mkfile(ns, "f", mid.ino).block_size == MiB             # the grandparent's
    assert mkfile(ns, "f", low.ino).block_size == MiB             # three up: the walk goes on
    ns.set_policy("/top/mid", Policy(block_size=2 * MiB))
    assert mkfile(ns, "g", low.ino).block_size == 2 * MiB
    assert mkfile(ns, "h", mid.ino).block_size == 2 * MiB
    ns.set_policy("/top/mid", Policy(replicas=3))                 # a policy without a block size
    assert mkfile(ns, "i", low.ino).block_size == 4 * MiB
    sub = ns.create(low.ino, "sub", FileType.DIRECTORY, 0o755)    # a directory takes no block size walk
    assert mkfile(ns, "f", sub.ino).block_size == 4 * MiB
