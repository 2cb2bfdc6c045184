"""pjdfstest (the POSIX syscall conformance suite, 8,798 tests; tmpfs passes them all) run
against a real mount when it is available: set PJDFSTEST to a built checkout (the directory
holding the `pjdfstest` binary and `tests/`). It is not vendored in this repository; see
docs/fuse.md for how to build it. The whole suite takes about 5 minutes here."""
from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

from tests.fuse.mounts import Mount

SUITE = os.environ.get("PJDFSTEST", "")


@pytest.mark.slow
@pytest.mark.timeout(3600)     # about 5 minutes on a quiet machine: over pytest's 300 s when it is busy
@pytest.mark.skipif(not (SUITE and (pathlib.Path(SUITE) / "pjdfstest").exists()),
                    reason="pjdfstest is external: set PJDFSTEST=/path/to/built/pjdfstest to run it")
def test_pjdfstest_passes_completely(shared_mount: Mount) -> None:
    work = shared_mount.path / "pjdfstest"
    work.mkdir()
    result = subprocess.run(["prove", "-r", str(pathlib.Path(SUITE) / "tests")], cwd=work, capture_output=True,
                            text=True, timeout=3600, check=False)
    failed = [line for line in result.stdout.splitlines() if "Failed" in line or "not ok" in line]
    assert result.returncode == 0 and "Result: PASS" in result.stdout, "\n".join(failed[-40:] or [result.stdout[-3000:]])
