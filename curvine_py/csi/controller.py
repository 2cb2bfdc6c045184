"""The CSI Controller service: volumes as directories with quotas, on the master.

Every handler validates the whole request before any side effect, then works idempotently:
CreateVolume by name (the id is derived from it), DeleteVolume by id (an unknown id is already
deleted), ControllerExpandVolume by the target size (never shrinks).
"""
from __future__ import annotations

import logging
from typing import Any

import grpc

from curvine_py.core.domain import Policy, StorageClass
from curvine_py.core.errors import NotFound
from curvine_py.csi import volumes
from curvine_py.csi.catalog import Catalog
from curvine_py.csi.errors import CsiError, already_exists, csi_method, invalid, not_found
from curvine_py.csi.locks import KeyedLocks
from curvine_py.csi.quota import enforce_capacity, space_under
from curvine_py.csi.volumes import Parameters, VolumeRecord
from curvine_py.proto.csi.v1 import csi_pb2 as csi
from curvine_py.proto.csi.v1 import csi_pb2_grpc

log = logging.getLogger(__name__)

RPC = csi.ControllerServiceCapability.RPC
# Exactly what this service implements (ControllerPublish, snapshots, clones: not offered).
CAPABILITIES = (RPC.CREATE_DELETE_VOLUME, RPC.LIST_VOLUMES, RPC.GET_CAPACITY, RPC.EXPAND_VOLUME)
_TOKEN_PREFIX = "after:"
_STORAGE_CLASS = {"cache": StorageClass.CACHE, "durable": StorageClass.DURABLE}


def page_token(volume_id: str) -> str:
    return _TOKEN_PREFIX + volume_id


def parse_token(token: str) -> str:
    if not token:
        return ""
    volume_id = token.removeprefix(_TOKEN_PREFIX)
    if not token.startswith(_TOKEN_PREFIX) or not volumes.is_volume_id(volume_id):
        raise CsiError(grpc.StatusCode.ABORTED, f"starting_token {token!r} was not issued by ListVolumes")
    return volume_id


class Controller(csi_pb2_grpc.ControllerServicer):
    def __init__(self, catalog: Catalog, *, default_base: str = volumes.DEFAULT_BASE_PATH) -> None:
        self.catalog = catalog
        self.client = catalog.client
        self.default_base = default_base
        self._locks = KeyedLocks()

    # -- create / delete ---------------------------------------------------------------------
    @csi_method
    def CreateVolume(self, request: csi.CreateVolumeRequest, context: Any) -> csi.CreateVolumeResponse:
        volumes.check_name(request.name)
        volumes.require_capabilities(request.volume_capabilities)
        if request.HasField("volume_content_source"):
            raise invalid("volume content sources (snapshots, clones) are not supported")
        params = volumes.parse_parameters(dict(request.parameters), self.default_base)
        capacity = volumes.capacity_of(request.capacity_range if request.HasField("capacity_range") else None)
        wanted = request.capacity_range if request.HasField("capacity_range") else None
        volume_id = volumes.volume_id(request.name)
        with self._locks.hold(volume_id):
            existing = self.catalog.lookup(volume_id)
            if existing is not None:
                return csi.CreateVolumeResponse(volume=self._repeat(existing, request.name, params, wanted))
            self._check_space(capacity, params.base_path)
            path = volumes.directory_for(request.name, params.base_path)
            found = self.catalog.record_at(path)
            if found is None and not self.catalog.make_directory(path):
                raise already_exists(f"{path} exists and is not a volume of this driver")
            if found is not None and found.volume_id != volume_id:
                raise already_exists(f"{path} belongs to volume {found.name!r}")
            record = VolumeRecord.new(request.name, path, capacity, params)
            self.catalog.write_record(record)
            self._apply_policy(record)
            enforce_capacity(self.client, path, capacity, params.max_inodes)
            self.catalog.add_to_index(record)
        log.info("created volume %s (%s) at %s, capacity %d, class %s", volume_id, request.name, path, capacity,
                 params.storage_class)
        return csi.CreateVolumeResponse(volume=record.to_volume())

    def _repeat(self, existing: VolumeRecord, name: str, params: Parameters,
                wanted: csi.CapacityRange | None) -> csi.Volume:
        """A CreateVolume for a name that exists: the same volume if compatible, else ALREADY_EXISTS."""
        if existing.name != name:
            raise already_exists(f"volume id {existing.volume_id} belongs to {existing.name!r}")
        if not volumes.capacity_fits(existing.capacity, wanted):
            raise already_exists(f"volume {name!r} exists with capacity {existing.capacity}")
        base = existing.path.rsplit("/", 1)[0] or "/"
        if not existing.same_parameters(params) or base != params.base_path:
            raise already_exists(f"volume {name!r} exists with other parameters")
        return existing.to_volume()

    def _check_space(self, capacity: int, base_path: str) -> None:
        space = space_under(self.client, base_path)
        if capacity and space.capacity and capacity > space.capacity:
            raise CsiError(grpc.StatusCode.OUT_OF_RANGE,
                           f"capacity {capacity} exceeds the {space.capacity} bytes {base_path} can hold")

    def _apply_policy(self, record: VolumeRecord) -> None:
        policy = Policy(storage_class=_STORAGE_CLASS[record.storage_class], replicas=record.replicas,
                        ttl_ms=record.ttl_ms)
        self.client.fs.set_policy(record.path, policy)

    @csi_method
    def DeleteVolume(self, request: csi.DeleteVolumeRequest, context: Any) -> csi.DeleteVolumeResponse:
        if not request.volume_id:
            raise invalid("volume_id is required")
        with self._locks.hold(request.volume_id):
            path = self.catalog.indexed_path(request.volume_id)
            if path is None:
                return csi.DeleteVolumeResponse()     # never existed, or already deleted
            record = self.catalog.record_at(path)
            if record is not None and record.volume_id == request.volume_id and record.on_delete == "delete":
                try:
                    self.client.fs.rm(path, recursive=True)
                except NotFound:
                    pass
            self.catalog.remove_from_index(request.volume_id)
        log.info("deleted volume %s (%s, data %s)", request.volume_id, path,
                 "kept" if record is not None and record.on_delete == "retain" else "removed")
        return csi.DeleteVolumeResponse()

    # -- queries -----------------------------------------------------------------------------
    def _volume(self, volume_id: str) -> VolumeRecord:
        if not volume_id:
            raise invalid("volume_id is required")
        record = self.catalog.lookup(volume_id)
        if record is None:
            raise not_found(f"volume {volume_id} does not exist")
        return record

    @csi_method
    def ValidateVolumeCapabilities(self, request: csi.ValidateVolumeCapabilitiesRequest,
                                   context: Any) -> csi.ValidateVolumeCapabilitiesResponse:
        if not request.volume_id:
            raise invalid("volume_id is required")
        if not request.volume_capabilities:
            raise invalid("volume_capabilities are required")
        if request.parameters:
            volumes.parse_parameters(dict(request.parameters), self.default_base)
        self._volume(request.volume_id)
        for capability in request.volume_capabilities:
            why = volumes.check_capability(capability)
            if why:
                return csi.ValidateVolumeCapabilitiesResponse(message=why)
        return csi.ValidateVolumeCapabilitiesResponse(confirmed=csi.ValidateVolumeCapabilitiesResponse.Confirmed(
            volume_context=request.volume_context, volume_capabilities=request.volume_capabilities,
            parameters=request.parameters))

    @csi_method
    def ListVolumes(self, request: csi.ListVolumesRequest, context: Any) -> csi.ListVolumesResponse:
        if request.max_entries < 0:
            raise invalid("max_entries must not be negative")
        after = parse_token(request.starting_token)
        reply = csi.ListVolumesResponse()
        while True:
            entries, more = self.catalog.entries(after, request.max_entries)
            for entry in entries:
                record = self.catalog.record_at(entry.path)
                if record is not None and record.volume_id == entry.volume_id:
                    reply.entries.add(volume=record.to_volume())
            # A page of stale entries only: keep going, so a short page always means "the end".
            if not entries or not more or reply.entries:
                break
            after = entries[-1].volume_id
        if more and entries:
            reply.next_token = page_token(entries[-1].volume_id)
        return reply

    @csi_method
    def GetCapacity(self, request: csi.GetCapacityRequest, context: Any) -> csi.GetCapacityResponse:
        params = volumes.parse_parameters(dict(request.parameters), self.default_base)
        space = space_under(self.client, params.base_path)
        if any(volumes.check_capability(c) for c in request.volume_capabilities):
            return csi.GetCapacityResponse(available_capacity=0)
        response = csi.GetCapacityResponse(available_capacity=space.available)
        if space.capacity:
            response.maximum_volume_size.value = space.capacity
        return response

    @csi_method
    def ControllerGetCapabilities(self, request: csi.ControllerGetCapabilitiesRequest,
                                  context: Any) -> csi.ControllerGetCapabilitiesResponse:
        return csi.ControllerGetCapabilitiesResponse(capabilities=[
            csi.ControllerServiceCapability(rpc=RPC(type=t)) for t in CAPABILITIES])

    @csi_method
    def ControllerExpandVolume(self, request: csi.ControllerExpandVolumeRequest,
                               context: Any) -> csi.ControllerExpandVolumeResponse:
        if not request.volume_id:
            raise invalid("volume_id is required")
        capacity = volumes.capacity_of(request.capacity_range if request.HasField("capacity_range") else None,
                                       required_field=True)
        if request.HasField("volume_capability"):
            volumes.require_capability(request.volume_capability)
        with self._locks.hold(request.volume_id):
            record = self._volume(request.volume_id)
            if record.capacity and capacity <= record.capacity:     # already that large: nothing to do
                return csi.ControllerExpandVolumeResponse(capacity_bytes=record.capacity)
            self._check_space(capacity, record.path.rsplit("/", 1)[0] or "/")
            enforce_capacity(self.client, record.path, capacity, record.max_inodes)
            self.catalog.write_record(record.with_capacity(capacity))
        log.info("expanded volume %s to %d bytes", request.volume_id, capacity)
        # The quota is live on the master: mounts see the new size at once, nothing to do on nodes.
        return csi.ControllerExpandVolumeResponse(capacity_bytes=capacity, node_expansion_required=False)
