"""The `--l2-adapter` JSON objects for `lmcache server` (LMCache's multiprocess mode) with curvine-py
as its L2, one function per way; each works as written on LMCache 0.5.6 and 0.5.7rc2
(docs/lmcache.md, "Versions"):

* `native_plugin` (the primary way): curvine_py.lmcache.native.CurvineNativeConnector;
* `plugin`: the full L2 adapter curvine_py.lmcache.l2_adapter.CurvineL2Adapter;
* `fs` / `fs_native`: LMCache's own file adapters over a curvine-py FUSE mount (no curvine-py
  package next to LMCache; every chunk is a file, written to a temporary name and renamed).

Every one says `"shared": true`: the store is one pool for the whole fleet. LMCache 0.5.7 tags an
`fs`/`fs_native` adapter STORAGE/REMOTE only with it (LOCAL otherwise: its memory-tag filters and
the coordinator would take a shared mount for one host's disk) and marks cache events and
coordinator placements shared; 0.5.6 accepts the field and keeps it on the adapter config.
Never add `affinity_tag`: 0.5.7 rejects it.
"""
from __future__ import annotations

from typing import Any

from curvine_py.core.errors import InvalidArgument

FS_KINDS = ("fs", "fs_native")


def _params(master: str, token: str | None, more: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {"master": master, **more}
    if token:
        params["token"] = token
    return params


def native_plugin(master: str, token: str | None = None, **params: Any) -> dict[str, Any]:
    """`params`: CurvineNativeConnector's (node, num_workers, timeout_s, replicas, batch_streams).
    Without a token the server's CURVINE_TOKEN is used."""
    return {"type": "native_plugin", "module_path": "curvine_py.lmcache.native",
            "class_name": "CurvineNativeConnector", "shared": True,
            "adapter_params": _params(master, token, params)}


def plugin(master: str, token: str | None = None, **params: Any) -> dict[str, Any]:
    """The full adapter; `params` as for native_plugin, plus max_capacity_gb."""
    return {"type": "plugin", "module_path": "curvine_py.lmcache.l2_adapter",
            "class_name": "CurvineL2Adapter", "shared": True,
            "adapter_params": _params(master, token, params)}


def fs(base_path: str, kind: str = "fs", **fields: Any) -> dict[str, Any]:
    """LMCache's `fs` (Python, aiofiles) or `fs_native` (C++) adapter on a directory of the mount,
    e.g. /mnt/curvine/lmcache-mp; `fields` are the adapter's own (num_workers, ...)."""
    if kind not in FS_KINDS:
        raise InvalidArgument(f"fs adapter kind {kind!r}: one of {', '.join(FS_KINDS)}")
    if not base_path.startswith("/"):
        raise InvalidArgument(f"base_path {base_path!r}: an absolute path on the mount")
    if "affinity_tag" in fields:
        raise InvalidArgument("affinity_tag: removed in LMCache 0.5.7 (an error there)")
    return {"type": kind, "base_path": base_path, "shared": True, **fields}
