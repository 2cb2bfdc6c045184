"""Validation of KV keys and namespace names/paths: what may reach a worker or the master.

Keys never become path components (object files are named by a hash of the key, see layout.py),
so a key cannot escape a data dir; these rules keep keys printable-safe and bounded.
"""
from __future__ import annotations

import posixpath

from curvine_py.core.errors import InvalidArgument, NameTooLong

DEFAULT_MAX_KEY_BYTES = 1024  # LMCache keys are ~100-300 bytes; the limit is configurable
NAME_MAX = 255
PATH_MAX = 4096


def validate_key(key: str, max_bytes: int = DEFAULT_MAX_KEY_BYTES) -> bytes:
    """Returns the key's UTF-8 bytes, or raises InvalidArgument/NameTooLong."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument("a key must be a non-empty string")
    if "\x00" in key:
        raise InvalidArgument("a key must not contain NUL")
    try:
        raw = key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("a key must be valid UTF-8") from None
    if len(raw) > max_bytes:
        raise NameTooLong(f"key of {len(raw)} bytes exceeds the limit of {max_bytes}")
    return raw


def validate_name(name: str) -> None:
    """A single directory entry name, as POSIX allows it."""
    if not name or name in (".", ".."):
        raise InvalidArgument(f"invalid name {name!r}")
    if "/" in name or "\x00" in name:
        raise InvalidArgument(f"a name must not contain '/' or NUL: {name!r}")
    if len(name.encode("utf-8", "surrogateescape")) > NAME_MAX:
        raise NameTooLong(f"name longer than {NAME_MAX} bytes")


def split_path(path: str) -> list[str]:
    """'/a/b/../c' -> ['a', 'c']. Paths are absolute within the namespace; '..' never goes above
    the root, so no path can name anything outside it."""
    if not path or "\x00" in path:
        raise InvalidArgument(f"invalid path {path!r}")
    if len(path.encode("utf-8", "surrogateescape")) > PATH_MAX:
        raise NameTooLong(f"path longer than {PATH_MAX} bytes")
    normal = posixpath.normpath("/" + path.lstrip("/"))
    parts = [p for p in normal.split("/") if p]
    for part in parts:
        validate_name(part)
    return parts
