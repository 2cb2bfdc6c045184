"""Client library: files (close-to-open) and KV objects (rendezvous-placed), blocking and asyncio.

    from curvine_py.client import CurvineClient
    with CurvineClient("127.0.0.1:8995") as c:
        c.fs.put("/local/file", "/remote/file")
        c.kv.put("key", b"bytes")
        data = c.kv.get("key")          # None on a miss

Several masters: `CurvineClient("a:8995,b:8995")`; every call goes to the leader (rpc/leader.py).
"""
from __future__ import annotations

import dataclasses
import socket
from typing import Self

from curvine_py.client.files import BlockStore, CurvineFile
from curvine_py.client.fs import FileSystem
from curvine_py.client.kv import KVClient
from curvine_py.client.master import MasterClient
from curvine_py.client.membership import MembershipCache
from curvine_py.client.suspects import Suspects
from curvine_py.client.types import FileStatus
from curvine_py.client.workerio import WorkerIO
from curvine_py.config import ClientConfig
from curvine_py.rpc.tls import tls_files

__all__ = ["ClientConfig", "CurvineClient", "CurvineFile", "FileStatus"]


class CurvineClient:
    def __init__(self, master: str | None = None, *, config: ClientConfig | None = None, **overrides: object) -> None:
        base = config or ClientConfig()
        if master is not None:
            overrides["master"] = master
        if overrides:
            base = dataclasses.replace(base, **overrides)  # type: ignore[arg-type]
        self.config = base
        self.node = base.node or socket.gethostname()
        self.master = MasterClient(base.master, token=base.token, timeout_s=base.rpc_timeout_s,
                                   tls=tls_files(base))
        self.membership = MembershipCache(self.master.membership, base.membership_refresh_s)
        self.io = WorkerIO(base, self.node)
        # Workers that just failed a request are tried last, by files and KV alike.
        self.suspects = Suspects()
        self.blocks = BlockStore(self.master, self.membership, self.io, self.suspects,
                                 deadline_s=base.block_deadline_s)
        self.fs = FileSystem(self.master, self.blocks, self.node)
        self.kv = KVClient(self.membership, self.io, replicas=base.kv_replicas, deadline_s=base.kv_deadline_s,
                           suspects=self.suspects)

    def close(self) -> None:
        self.kv.close()
        self.blocks.close()
        self.io.close()
        self.master.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

