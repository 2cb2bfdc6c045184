"""Parse HyperPod request paths into typed routes, refusing unsafe names.

The client percent-encodes bucket and key with ``quote(..., safe="")``, so a
literal ``/`` never appears inside a path component. A decoded key may hold
``/`` (LMCache keys start with model names such as ``org/model``) but no
``.``/``..``/empty segment and no NUL; a bucket may hold none of these.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

MAX_NAME_BYTES = 1024


class BadPath(ValueError):
    """A request path that is not part of the protocol or names something unsafe."""


@dataclass(frozen=True)
class PutObject:
    bucket: str
    key: str


@dataclass(frozen=True)
class AcquireLease:
    bucket: str
    key: str


@dataclass(frozen=True)
class ReleaseLease:
    lease_id: str


Route = PutObject | AcquireLease | ReleaseLease


def _name(raw: str, what: str, slashes: bool = False) -> str:
    try:
        name = urllib.parse.unquote(raw, errors="strict")
    except UnicodeDecodeError as exc:
        raise BadPath(f"{what} is not valid UTF-8 after percent-decoding") from exc
    if not name:
        raise BadPath(f"{what} is empty")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise BadPath(f"{what} is longer than {MAX_NAME_BYTES} bytes")
    if "\x00" in name:
        raise BadPath(f"{what} contains NUL")
    segments = name.split("/")
    if not slashes and len(segments) > 1:
        raise BadPath(f"{what} {name!r} may not contain '/'")
    if any(seg in ("", ".", "..") for seg in segments):
        raise BadPath(f"{what} {name!r} has an empty, '.' or '..' segment")
    return name


def parse(method: str, target: str) -> Route:
    """Map ``method`` and a request target (path plus optional query) to a route."""
    path = urllib.parse.urlsplit(target).path
    parts = path.split("/")
    if len(parts) < 2 or parts[0] != "" or parts[1] != "v1":
        raise BadPath(f"{path!r} is not a /v1/ path")
    rest = parts[2:]
    if method == "PUT" and len(rest) == 3 and rest[0] == "kv":
        return PutObject(_name(rest[1], "bucket"), _name(rest[2], "key", slashes=True))
    if method == "POST" and len(rest) == 4 and rest[0] == "kv" and rest[3] == "leases":
        return AcquireLease(
            _name(rest[1], "bucket"), _name(rest[2], "key", slashes=True)
        )
    if (
        method == "POST"
        and len(rest) == 3
        and rest[0] == "leases"
        and rest[2] == "release"
    ):
        return ReleaseLease(_name(rest[1], "lease id"))
    raise BadPath(f"{method} {path!r} is not part of the HyperPod protocol")
