"""`--meta URL` parsing (master/engine/url.py): what each URL means, what each bad one gets, and
that a password never shows in a repr or the masked form."""
from __future__ import annotations

import pathlib

import pytest

from curvine_py.core.errors import InvalidArgument
from curvine_py.master.engine import open as engine
from curvine_py.master.engine.url import POSTGRESQL, SQLITE, parse_meta_url


def test_sqlite_url_names_an_absolute_file(tmp_path: pathlib.Path) -> None:
    url = parse_meta_url(f"sqlite://{tmp_path}/sub/meta.db")
    assert (url.engine, url.path) == (SQLITE, f"{tmp_path}/sub/meta.db")
    assert url.masked() == f"sqlite://{tmp_path}/sub/meta.db"
    assert parse_meta_url(f"sqlite3://{tmp_path}/m.db").path == f"{tmp_path}/m.db"
    assert engine.default_url(str(tmp_path)).path == f"{tmp_path}/meta.db"


@pytest.mark.parametrize(("text", "why"), [
    ("meta.db", "unknown metadata engine"),
    ("mysql://u@h/db", "unknown metadata engine"),
    ("sqlite://relative/meta.db", "absolute path"),
    ("sqlite:///tmp/m.db?mode=ro", "no parameters"),
    ("postgresql:///db", "no host"),
    ("postgresql://u@host", "name one database"),
    ("postgresql://u@host/a/b", "name one database"),
    ("postgresql://u@host:99999/db", "out of range"),
    ("postgresql://u@host/db?sslmod=require", "unknown parameter 'sslmod'"),
    ("postgresql://u@host/db#x", "fragment"),
])
def test_a_bad_url_gets_a_clear_error(text: str, why: str) -> None:
    with pytest.raises(InvalidArgument, match=why):
        parse_meta_url(text)


def test_a_directory_is_not_a_database(tmp_path: pathlib.Path) -> None:
    with pytest.raises(InvalidArgument, match="names a directory"):
        parse_meta_url(f"sqlite://{tmp_path}")


def test_postgresql_url_parts_and_the_password_masked() -> None:
    url = parse_meta_url("postgres://curvine:s3cr%40t@db.example:6432/meta?sslmode=require")
    assert (url.engine, url.host, url.port, url.user, url.database) == (POSTGRESQL, "db.example", 6432,
                                                                         "curvine", "meta")
    assert url.params == (("sslmode", "require"),)
    assert url.password == "s3cr@t"
    assert "s3cr" not in url.masked() and "s3cr" not in repr(url)
    assert url.masked() == "postgresql://curvine:***@db.example:6432/meta?sslmode=require"
    assert parse_meta_url("postgresql://u@h/d").port == 5432


def test_password_file(tmp_path: pathlib.Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    url = parse_meta_url("postgresql://u@h/d", password_file=str(secret))
    assert url.password == "hunter2" and "hunter2" not in repr(url) and ":***@" in url.masked()
    with pytest.raises(InvalidArgument, match="both in the URL and in --meta-password-file"):
        parse_meta_url("postgresql://u:x@h/d", password_file=str(secret))
    with pytest.raises(InvalidArgument, match="cannot read"):
        parse_meta_url("postgresql://u@h/d", password_file=str(tmp_path / "missing"))
    (tmp_path / "empty").write_text("")
    with pytest.raises(InvalidArgument, match="is empty"):
        parse_meta_url("postgresql://u@h/d", password_file=str(tmp_path / "empty"))
    with pytest.raises(InvalidArgument, match="only for a postgresql"):
        parse_meta_url(f"sqlite://{tmp_path}/m.db", password_file=str(secret))


def test_an_unparsable_url_is_reported_without_its_password() -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_meta_url("postgresql://u:topsecret@host:notaport/db")
    assert "topsecret" not in str(info.value) and "u:***@host" in str(info.value)

