"""`--meta URL`: which metadata engine holds the namespace, and its credentials.

    sqlite:///ABSOLUTE/PATH/meta.db                       the embedded default (one file)
    postgresql://USER@HOST[:PORT]/DBNAME[?sslmode=...]    a PostgreSQL database (also postgres://)

The password of a PostgreSQL URL comes from `--meta-password-file` (preferred: a command line is
visible to every user through `ps`), else the URL itself, else libpq's own PGPASSWORD / PGPASSFILE.
It never reaches a log line or a repr: `MetaURL.masked()` is what gets logged.
"""
from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass, field

from curvine_py.core.errors import InvalidArgument

SQLITE = "sqlite"
POSTGRESQL = "postgresql"
_SCHEMES = {"sqlite": SQLITE, "sqlite3": SQLITE, "postgresql": POSTGRESQL, "postgres": POSTGRESQL}
DEFAULT_PG_PORT = 5432
# The query parameters a PostgreSQL URL may carry (libpq's names); anything else is a typo.
PG_PARAMS = frozenset({"sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout",
                       "application_name", "target_session_attrs", "options"})
_USAGE = "expected sqlite:///ABSOLUTE/PATH or postgresql://USER@HOST[:PORT]/DBNAME"


@dataclass(frozen=True, slots=True)
class MetaURL:
    engine: str                         # SQLITE or POSTGRESQL
    path: str = ""                      # SQLite: the database file
    host: str = ""                      # PostgreSQL: server, port, user, database, libpq parameters
    port: int = 0
    user: str = ""
    database: str = ""
    params: tuple[tuple[str, str], ...] = ()
    password: str = field(default="", repr=False)   # never in a repr, so never in a log line

    def masked(self) -> str:
        """The URL for logs and messages: the password, if any, as ***."""
        if self.engine == SQLITE:
            return f"sqlite://{self.path}"
        auth = urllib.parse.quote(self.user, safe="") + (":***" if self.password else "")
        host = f"[{self.host}]" if ":" in self.host else self.host
        query = f"?{urllib.parse.urlencode(self.params)}" if self.params else ""
        return f"postgresql://{auth}@{host}:{self.port}/{urllib.parse.quote(self.database, safe='')}{query}"


def sqlite_url(path: str) -> MetaURL:
    return MetaURL(SQLITE, path=os.path.abspath(path))


def parse_meta_url(text: str, *, password_file: str = "") -> MetaURL:
    """Parses `--meta`; a malformed URL raises InvalidArgument saying what is wrong (with the
    password masked). `password_file` is only for PostgreSQL."""
    scheme, sep, rest = text.partition("://")
    engine = _SCHEMES.get(scheme.lower()) if sep else None
    if engine is None:
        raise InvalidArgument(f"unknown metadata engine URL {_mask_raw(text)!r}: {_USAGE}")
    if engine == SQLITE:
        if password_file:
            raise InvalidArgument("--meta-password-file is only for a postgresql:// metadata engine")
        return _parse_sqlite(text, rest)
    return _parse_postgresql(text, password_file)


def _parse_sqlite(text: str, rest: str) -> MetaURL:
    if not rest.startswith("/"):
        raise InvalidArgument(f"{text!r}: a SQLite URL names a file by its absolute path "
                              f"(sqlite:///var/lib/curvine-py/meta.db), never a host")
    path, _, query = rest.partition("?")
    if query:
        raise InvalidArgument(f"{text!r}: a SQLite URL takes no parameters")
    path = urllib.parse.unquote(path)
    if path.endswith("/") or os.path.isdir(path):
        raise InvalidArgument(f"{text!r}: names a directory; name the database file (.../meta.db)")
    return MetaURL(SQLITE, path=os.path.normpath(path))


def _parse_postgresql(text: str, password_file: str) -> MetaURL:
    masked = _mask_raw(text)
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port or DEFAULT_PG_PORT
    except ValueError as exc:
        raise InvalidArgument(f"{masked!r}: {exc}") from None
    if not parts.hostname:
        raise InvalidArgument(f"{masked!r}: no host: {_USAGE}")
    database = urllib.parse.unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise InvalidArgument(f"{masked!r}: name one database after the host: {_USAGE}")
    if parts.fragment:
        raise InvalidArgument(f"{masked!r}: a URL fragment (#...) means nothing here")
    params: list[tuple[str, str]] = []
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        if key not in PG_PARAMS:
            raise InvalidArgument(f"{masked!r}: unknown parameter {key!r} (known: {', '.join(sorted(PG_PARAMS))})")
        params.append((key, value))
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    if password_file:
        if password:
            raise InvalidArgument(f"{masked!r}: a password both in the URL and in --meta-password-file")
        password = read_password_file(password_file)
    return MetaURL(POSTGRESQL, host=parts.hostname, port=port, user=user, database=database,
                   params=tuple(params), password=password)


def read_password_file(path: str) -> str:
    """The first line of the file, without its newline; a missing or empty file is an error."""
    try:
        with open(path, encoding="utf-8") as fh:
            password = fh.readline().rstrip("\r\n")
    except OSError as exc:
        raise InvalidArgument(f"cannot read the metadata password file {path}: {exc.strerror}") from None
    if not password:
        raise InvalidArgument(f"the metadata password file {path} is empty")
    return password


def _mask_raw(text: str) -> str:
    """`text` with whatever sits between '://user:' and '@' replaced, for messages about a URL
    that did not parse (it may still hold a password)."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    netloc, slash, tail = rest.partition("/")
    auth, at, host = netloc.rpartition("@")
    if not at or ":" not in auth:
        return text
    return f"{scheme}://{auth.split(':', 1)[0]}:***@{host}{slash}{tail}"
