"""A secret on the command line (which `ps` shows every local user) is accepted with a warning that
says what to use instead; the same secret from a file or the environment draws none."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from curvine_py import config

TOKEN = "secret-flags-t0ken-0123456789"
WARNING = "every local user sees it in ps"


def master_stderr(tmp_path: pathlib.Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Starts a master, waits for its ready line, stops it; returns what it wrote on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "curvine_py.cli.main", "master", "--data-dir",
                             str(tmp_path / "m"), "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("master="), line
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    return err


def test_a_token_flag_is_warned_about_and_a_token_file_is_not(tmp_path: pathlib.Path) -> None:
    err = master_stderr(tmp_path, "--token", TOKEN)
    assert "the token was given with --token" in err and "--token-file" in err and WARNING in err
    assert TOKEN not in err
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert WARNING not in master_stderr(tmp_path, "--token-file", str(token_file))
    assert WARNING not in master_stderr(tmp_path, env={"CURVINE_TOKEN": TOKEN})


def test_a_password_in_a_meta_url_flag_is_warned_about_without_being_shown(caplog) -> None:  # type: ignore[no-untyped-def]
    config.warn_password_in_url_flag("postgresql://curvine:hunter2@db.example:5432/curvine")
    assert "holds a password" in caplog.text and "--meta-password-file" in caplog.text
    assert "hunter2" not in caplog.text
    caplog.clear()
    for quiet in ("postgresql://curvine@db.example:5432/curvine", "sqlite:///var/lib/meta.db",
                  "postgresql://db.example/curvine"):
        config.warn_password_in_url_flag(quiet)
    assert caplog.text == ""


def test_meta_dump_with_a_password_in_its_url_warns_and_never_prints_it(tmp_path: pathlib.Path) -> None:
    result = subprocess.run([sys.executable, "-m", "curvine_py.cli.main", "meta", "dump", "--meta",
                             "postgresql://curvine:hunter2@127.0.0.1:1/curvine", str(tmp_path / "out.dump")],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0                 # nothing listens on port 1
    assert "holds a password" in result.stderr and "hunter2" not in result.stderr + result.stdout
