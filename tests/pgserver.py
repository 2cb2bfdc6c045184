"""A throwaway PostgreSQL cluster for tests and benchmarks: Debian's postgresql 15 binaries,
`initdb` into a temp dir as the `postgres` user (initdb refuses root), served on a loopback port
and a private unix socket dir, stopped and deleted at exit.

    with PgServer(tmp_path / "pg") as pg:
        url = pg.url("meta")          # postgresql://curvine@127.0.0.1:PORT/meta (database created)
        pg.restart()                  # fast restart: every session is cut, data kept

`available()` says why the binaries cannot be used (absent, no `postgres` user), so a test can
fail with that reason when CURVINE_REQUIRE_POSTGRES=1 (CI) and skip with it otherwise.
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import pwd
import shutil
import socket
import subprocess
import time
from typing import Self

PG_BIN_DIRS = sorted(pathlib.Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
USER = "curvine"
PASSWORD = "curvine-test-password"


def pg_bin() -> pathlib.Path | None:
    for directory in PG_BIN_DIRS:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    return None


def available() -> str:
    """'' when a cluster can be started here, else the reason it cannot."""
    if pg_bin() is None:
        return "PostgreSQL server binaries not found under /usr/lib/postgresql (apt-get install postgresql)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no 'postgres' system user to run initdb as (apt-get install postgresql creates it)"
    return ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgServer:
    def __init__(self, root: pathlib.Path, *, port: int = 0) -> None:
        reason = available()
        if reason:
            raise RuntimeError(reason)
        self.bin = pg_bin()
        assert self.bin is not None
        self.root = pathlib.Path(root)
        self.data = self.root / "data"
        self.sockets = self.root / "sockets"
        self.port = port or _free_port()
        self._owner = pwd.getpwnam("postgres")
        self._started = False

    def _as_postgres(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["runuser", "-u", "postgres", "--", *args], check=check,
                              capture_output=True, text=True, timeout=120)

    def _chown(self, path: pathlib.Path) -> None:
        os.chown(path, self._owner.pw_uid, self._owner.pw_gid)

    def __enter__(self) -> Self:
        self.root.mkdir(parents=True, exist_ok=True)
        self.sockets.mkdir(exist_ok=True)
        for path in (self.root, self.sockets):
            self._chown(path)
        # The root dir of a pytest tmp_path is 0700 root: let postgres reach its own dirs.
        for parent in [self.root, *self.root.parents]:
            if parent == pathlib.Path("/"):
                break
            mode = parent.stat().st_mode
            if not mode & 0o001:
                os.chmod(parent, mode | 0o001)
        password_file = self.root / "pwfile"
        password_file.write_text(PASSWORD + "\n")
        self._chown(password_file)
        self._as_postgres(str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, "-A", "scram-sha-256",
                          "--pwfile", str(password_file), "-E", "UTF8", "--no-sync")
        password_file.unlink()
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                       f"unix_socket_directories = '{self.sockets}'\nfsync = off\n"
                       "full_page_writes = off\nmax_connections = 200\nshared_buffers = 128MB\n")
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def start(self) -> None:
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60",
                          "-l", str(self.root / "server.log"), "start")
        self._started = True

    def stop(self, mode: str = "fast") -> None:
        if self._started:
            self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop",
                              check=False)
            self._started = False

    def restart(self, *, down_s: float = 0.0) -> None:
        """Stop (cutting every session), stay down `down_s` seconds, start again."""
        self.stop()
        time.sleep(down_s)
        self.start()

    def psql(self, sql: str, database: str = "postgres") -> str:
        env = {**os.environ, "PGPASSWORD": PASSWORD}
        done = subprocess.run([str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER,
                               "-d", database, "-v", "ON_ERROR_STOP=1", "-Atqc", sql],
                              check=True, capture_output=True, text=True, env=env, timeout=60)
        return done.stdout

    def create_database(self, name: str) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.psql(f'DROP DATABASE IF EXISTS "{name}"')
        self.psql(f'CREATE DATABASE "{name}"')

    def url(self, database: str = "meta", *, with_password: bool = True, create: bool = True) -> str:
        if create:
            self.create_database(database)
        auth = f"{USER}:{PASSWORD}" if with_password else USER
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"
