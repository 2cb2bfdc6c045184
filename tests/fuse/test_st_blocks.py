"""st_blocks through a real mount counts the bytes stored, not the size (issue 15): a sparse file
takes what was written, `du` says so, a full file takes its size, and a file being written counts
at least what it holds."""
from __future__ import annotations

import os
import pathlib
import subprocess

from tests.fuse.mounts import Mount
from tests.harness import random_bytes

MiB = 1 << 20
TiB = 1 << 40


def test_dense_file_counts_its_size(shared_mount: Mount) -> None:
    path = shared_mount.path / "st-blocks-dense"
    path.write_bytes(random_bytes(3 * MiB + 100, seed=1))
    assert os.stat(path).st_blocks == -(-(3 * MiB + 100) // 512)


def test_sparse_file_counts_only_what_was_written(shared_mount: Mount) -> None:
    path = shared_mount.path / "st-blocks-sparse"
    with open(path, "wb") as f:
        f.truncate(TiB)                    # a 1 TiB hole
    assert os.stat(path).st_size == TiB
    assert os.stat(path).st_blocks == 0
    with open(path, "r+b") as f:
        f.seek(TiB // 2)
        f.write(random_bytes(MiB, seed=2))
    st = os.stat(path)
    assert st.st_size == TiB
    # The block holding the write is stored from its start (the bytes before the write inside it
    # are zeros it holds); the rest of the terabyte is a hole: far below the size.
    assert MiB // 512 <= st.st_blocks <= (64 * MiB + MiB) // 512, st.st_blocks
    du = subprocess.run(["du", "-k", str(path)], check=True, capture_output=True, text=True)
    assert int(du.stdout.split()[0]) < 70 * 1024, du.stdout                  # du: kilobytes stored, not 1 TiB
    apparent = subprocess.run(["du", "-k", "--apparent-size", str(path)], check=True, capture_output=True, text=True)
    assert int(apparent.stdout.split()[0]) == TiB // 1024


def test_file_open_for_writing_counts_its_pending_bytes(shared_mount: Mount) -> None:
    path: pathlib.Path = shared_mount.path / "st-blocks-pending"
    with open(path, "wb") as f:
        f.write(random_bytes(2 * MiB, seed=3))
        f.flush()                           # in the mount's write buffer, not committed yet
        assert os.fstat(f.fileno()).st_blocks >= 2 * MiB // 512
    assert os.stat(path).st_blocks == 2 * MiB // 512
