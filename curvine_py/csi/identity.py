"""The CSI Identity service: who the plugin is, what it offers, and whether it can serve now."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from curvine_py.core.errors import CurvineError
from curvine_py.csi.errors import csi_method
from curvine_py.proto.csi.v1 import csi_pb2 as csi
from curvine_py.proto.csi.v1 import csi_pb2_grpc

log = logging.getLogger(__name__)

DRIVER_NAME = "csi.curvine.io"
Service = csi.PluginCapability.Service
Expansion = csi.PluginCapability.VolumeExpansion


class Identity(csi_pb2_grpc.IdentityServicer):
    def __init__(self, *, name: str, version: str, controller: bool, master_answers: Callable[[], bool]) -> None:
        self.name = name
        self.version = version
        self.controller = controller
        self._master_answers = master_answers

    @csi_method
    def GetPluginInfo(self, request: csi.GetPluginInfoRequest, context: Any) -> csi.GetPluginInfoResponse:
        return csi.GetPluginInfoResponse(name=self.name, vendor_version=self.version)

    @csi_method
    def GetPluginCapabilities(self, request: csi.GetPluginCapabilitiesRequest,
                              context: Any) -> csi.GetPluginCapabilitiesResponse:
        capabilities = [csi.PluginCapability(volume_expansion=Expansion(type=Expansion.ONLINE))]
        if self.controller:
            capabilities.insert(0, csi.PluginCapability(service=Service(type=Service.CONTROLLER_SERVICE)))
        return csi.GetPluginCapabilitiesResponse(capabilities=capabilities)

    @csi_method
    def Probe(self, request: csi.ProbeRequest, context: Any) -> csi.ProbeResponse:
        response = csi.ProbeResponse()
        response.ready.value = self._master_answers()
        return response


def master_probe(statfs: Callable[[], object]) -> Callable[[], bool]:
    """Ready means the master answers a cheap call now."""

    def answers() -> bool:
        try:
            statfs()
            return True
        except CurvineError as exc:
            log.info("probe: the master does not answer: %s", exc.message)
            return False

    return answers
