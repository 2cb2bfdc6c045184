"""`curvine-py master --meta URL` as a process: a SQLite file anywhere, one writer per file, and
what a malformed URL gets at start (exit 2 and a clear message). PostgreSQL: tests/integration/test_pg_*.py."""
from __future__ import annotations

import pathlib

from curvine_py.client import CurvineClient
from curvine_py.procs import curvine_command, start
from tests.integration.test_cli import cli


def test_a_master_on_a_sqlite_file_named_by_url(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "elsewhere" / "ns.db"
    master = start("master", curvine_command("master", "--data-dir", str(tmp_path / "d1"), "--port", "0",
                                             "--meta", f"sqlite://{db}"), ready_prefix="master=")
    try:
        client = CurvineClient(master.address)
        try:
            client.fs.mkdir("/made-here")
            assert [e.path for e in client.fs.ls("/")] == ["/made-here"]
        finally:
            client.close()
        assert db.is_file() and not (tmp_path / "d1" / "meta.db").exists()
        # A second master on the same database file (another data dir) is refused: one writer.
        second = cli("master", "--data-dir", str(tmp_path / "d2"), "--port", "0", "--meta", f"sqlite://{db}")
        assert second.returncode == 2 and b"another master (or meta load) is using" in second.stderr
    finally:
        master.stop()


def test_a_bad_meta_url_stops_the_master_at_start(tmp_path: pathlib.Path) -> None:
    result = cli("master", "--data-dir", str(tmp_path), "--port", "0", "--meta", "sqlite://relative.db")
    assert result.returncode == 2 and b"absolute path" in result.stderr
    result = cli("master", "--data-dir", str(tmp_path), "--port", "0", "--meta-password-file", "/nope")
    assert result.returncode == 2 and b"needs a postgresql:// --meta" in result.stderr
