"""The one driver object: the services this process serves (chosen by --controller / --node),
the cluster client they share, and registering them on a gRPC server."""
from __future__ import annotations

import logging
import os
from importlib import metadata

import grpc

from curvine_py.client import CurvineClient
from curvine_py.csi.catalog import Catalog
from curvine_py.csi.controller import Controller
from curvine_py.csi.driver_settings import DriverSettings
from curvine_py.csi.identity import Identity, master_probe
from curvine_py.proto.csi.v1 import csi_pb2_grpc

log = logging.getLogger(__name__)


def version() -> str:
    try:
        return metadata.version("curvine-py")
    except metadata.PackageNotFoundError:
        return "dev"


class Driver:
    def __init__(self, settings: DriverSettings) -> None:
        self.settings = settings
        tls = {f: os.environ.get(f"CURVINE_{f.upper()}", "") for f in ("tls_cert", "tls_key", "tls_ca")}
        self.client = CurvineClient(settings.master, token=settings.token, node=settings.node_id,
                                    rpc_timeout_s=3.0, tls_cert=tls["tls_cert"], tls_key=tls["tls_key"],
                                    tls_ca=tls["tls_ca"])   # TLS from CURVINE_TLS_CERT/KEY/CA, as the mounts
        self.catalog = Catalog(self.client, settings.index_dir)
        self.identity = Identity(name=settings.name, version=version(), controller=settings.controller,
                                 master_answers=master_probe(self.client.master.statfs))
        self.controller = Controller(self.catalog, default_base=settings.base_path) if settings.controller else None
        self.node = None
        if settings.node:
            # the node side needs mount machinery the controller does not
            from curvine_py.csi.node import Node
            self.node = Node(self.catalog, settings)

    def register(self, server: grpc.Server) -> None:
        csi_pb2_grpc.add_IdentityServicer_to_server(self.identity, server)  # type: ignore[no-untyped-call]
        if self.controller is not None:
            csi_pb2_grpc.add_ControllerServicer_to_server(self.controller, server)  # type: ignore[no-untyped-call]
        if self.node is not None:
            csi_pb2_grpc.add_NodeServicer_to_server(self.node, server)  # type: ignore[no-untyped-call]

    def start(self) -> None:
        if self.node is not None:
            self.node.start()

    def stop(self) -> None:
        """Stops serving; the volumes' mount processes are left running (a restarted plugin adopts them)."""
        if self.node is not None:
            self.node.stop()
        self.client.close()
