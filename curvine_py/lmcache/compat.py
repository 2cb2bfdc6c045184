"""Which LMCache is installed, and what differs between the versions curvine-py is tested with:
0.5.6 (the locked default) and 0.5.7rc2 (`scripts/test-lmcache-next.sh`). docs/lmcache.md has
the version matrix; the facts come from a diff of the two wheels:

* 0.5.7 removed `lm://` (the client `lm_connector.py`, the server `lmcache.v1.server` and the
  `lmcache_server` script): the worker's lm:// port still serves LMCache <= 0.5.6 engines, and
  `check_remote_url` turns an `lm://` URL on a newer LMCache into one clear error instead of an
  engine that silently runs without its remote tier.
* The in-process engine moved from `lmcache.v1.<module>` to `lmcache.inprocess.v1.<module>`
  (cache_engine, gpu_connector, protocol's RemoteMetadata, basic_check, ...): `inprocess_module`.
* A full `{"type": "plugin"}` L2 adapter must implement `get_memory_tags()` (`memory_tags`).

Nothing here imports lmcache at module import time: `lmcache_version()` is cheap to ask.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
from types import ModuleType
from typing import Any

LM_PROTOCOL_LAST = (0, 5, 6)   # the newest LMCache with an lm:// client and server
TESTED = ("0.5.6", "0.5.7rc2")


class UnsupportedLMCache(RuntimeError):
    """A way of use that the installed LMCache does not have (e.g. lm:// on LMCache >= 0.5.7)."""


def lmcache_version_string() -> str:
    """The installed LMCache's version ('0.5.6', '0.5.7rc2'); ImportError when it is not installed."""
    from lmcache import _version  # the setuptools-scm file of the package that imports

    return str(_version.__version__)


def parse_version(text: str) -> tuple[int, int, int]:
    """'0.5.7rc2' -> (0, 5, 7): the release a pre-release leads to (its APIs are that release's)."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if match is None:
        raise ValueError(f"not an LMCache version: {text!r}")
    return int(match[1]), int(match[2]), int(match[3] or 0)


def lmcache_version() -> tuple[int, int, int]:
    return parse_version(lmcache_version_string())


def has_lm_protocol(version: tuple[int, int, int] | None = None) -> bool:
    """True when LMCache (the installed one unless given) still ships its lm:// client."""
    return (version or lmcache_version()) <= LM_PROTOCOL_LAST


def lm_protocol_error(version: str | None = None) -> UnsupportedLMCache:
    found = version or lmcache_version_string()
    return UnsupportedLMCache(
        f"lm:// needs LMCache <= {'.'.join(map(str, LM_PROTOCOL_LAST))}: LMCache {found} removed its lm:// "
        "client and server (lm_connector.py, lmcache.v1.server, lmcache_server). Use the native plugin "
        "(in-process: remote_storage_plugins with curvine_py.lmcache.connector; multiprocess: the "
        "native_plugin L2 adapter curvine_py.lmcache.native) or fs:// over the mount; see docs/lmcache.md")


def check_remote_url(url: str | None) -> None:
    """Raises UnsupportedLMCache for a `remote_url` the installed LMCache cannot use. LMCache 0.5.7
    itself only logs that no adapter parses `lm://` and runs on without a remote tier."""
    if url and url.startswith("lm://") and not has_lm_protocol():
        raise lm_protocol_error()


def inprocess_module(name: str) -> ModuleType:
    """`lmcache.inprocess.v1.<name>` (>= 0.5.7, "deprecated in-process LMCache") or, before the
    move, `lmcache.v1.<name>`: e.g. 'cache_engine', 'gpu_connector.mock_gpu_connector'."""
    return importlib.import_module(inprocess_module_name(name))


def inprocess_module_name(name: str) -> str:
    moved = f"lmcache.inprocess.v1.{name}"
    if importlib.util.find_spec("lmcache.inprocess") is not None:
        return moved
    return f"lmcache.v1.{name}"


def remote_metadata_class() -> Any:
    """LMCache's RemoteMetadata (the 28-byte header kept with each in-process remote object):
    lmcache.v1.protocol up to 0.5.6, lmcache.inprocess.v1.protocol from 0.5.7."""
    for module in ("lmcache.v1.protocol", "lmcache.inprocess.v1.protocol"):
        found = getattr(importlib.import_module(module), "RemoteMetadata", None)
        if found is not None:
            return found
    raise UnsupportedLMCache(f"LMCache {lmcache_version_string()} has no RemoteMetadata")


def remote_storage_tags() -> Any:
    """MemoryTags(STORAGE, REMOTE) where LMCache has memory tags (>= 0.5.7); None before."""
    try:
        from lmcache.v1.distributed.api import MemoryResidency, MemorySegment, MemoryTags
    except ImportError:
        return None
    return MemoryTags(MemorySegment.STORAGE, MemoryResidency.REMOTE)
