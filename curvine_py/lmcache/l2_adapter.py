"""LMCache multiprocess mode: a full `{"type": "plugin"}` L2 adapter (an `L2AdapterInterface`
subclass), for deployments that configure adapters by class rather than through `native_plugin`:

    lmcache server ... --l2-adapter '{"type": "plugin", "shared": true,
        "module_path": "curvine_py.lmcache.l2_adapter", "class_name": "CurvineL2Adapter",
        "adapter_params": {"master": "10.0.0.1:8995"}}'

It is the `native_plugin` way in another wrapper: CurvineNativeConnector (native.py) under
LMCache's own NativeConnectorL2Adapter (three eventfds, a demux thread, client-side locks, byte
accounting), so both ways move bytes the same way and read each other's objects (same key
strings). What this class adds is what the `plugin` factory needs on both LMCache versions:

* LMCache's plugin factory calls `cls(adapter_params, l1_memory_desc=...)`; later releases may
  pass more keywords, so anything else is accepted and ignored (`**kwargs`).
* 0.5.7 made `get_memory_tags()` abstract: curvine is STORAGE / REMOTE (a fleet-shared store
  off this host), as LMCache itself tags `native_plugin`. 0.5.6 has no memory tags (None there;
  nothing asks). NativeConnectorL2Adapter takes the tags as its second argument from 0.5.7 on.

`adapter_params` are CurvineNativeConnector's (`master`, `token`, `node`, `num_workers`,
`timeout_s`, `replicas`, `batch_streams`) plus `max_capacity_gb` (LMCache's usage
accounting; 0 = unbounded, the cluster's watermarks bound it).
"""
from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import NativeConnectorL2Adapter

from curvine_py.core.errors import InvalidArgument
from curvine_py.lmcache.compat import remote_storage_tags
from curvine_py.lmcache.native import CurvineNativeConnector

log = logging.getLogger(__name__)

_TAKES_TAGS = "memory_tags" in inspect.signature(NativeConnectorL2Adapter.__init__).parameters


class CurvineL2Adapter(NativeConnectorL2Adapter):  # type: ignore[misc]
    def __init__(self, config: Mapping[str, Any] | None = None, l1_memory_desc: Any = None,
                 **kwargs: Any) -> None:
        if config is not None and not isinstance(config, Mapping):
            raise InvalidArgument(f"CurvineL2Adapter takes adapter_params as a dict, not {type(config).__name__}")
        params = dict(config or {})
        if kwargs:
            log.debug("CurvineL2Adapter: ignoring factory arguments %s", sorted(kwargs))
        capacity_gb = float(params.pop("max_capacity_gb", 0))
        if capacity_gb < 0:
            raise InvalidArgument(f"max_capacity_gb {capacity_gb}: not negative")
        connector = CurvineNativeConnector(**params)
        self._tags = remote_storage_tags()
        status = {"master": connector.master}
        try:
            if _TAKES_TAGS:
                super().__init__(connector, self._tags, max_capacity_gb=capacity_gb, type_name="curvine",
                                 extra_status=status)
            else:
                super().__init__(connector, max_capacity_gb=capacity_gb, type_name="curvine", extra_status=status)
        except BaseException:
            connector.close()
            raise

    def get_memory_tags(self) -> Any:
        """MemoryTags(STORAGE, REMOTE) on LMCache >= 0.5.7; None on 0.5.6 (which has none)."""
        return self._tags
