"""Identity and Controller over the real unix socket, against a real cluster: every RPC's answer,
its bad-input status codes, idempotency and pagination (csi-sanity's controller categories)."""
from __future__ import annotations

import os
import stat

import grpc
import pytest

from curvine_py.core.domain import StorageClass
from curvine_py.csi.volumes import RECORD_XATTR, volume_id
from curvine_py.proto.csi.v1 import csi_pb2 as csi
from tests.csi.plugin import Mode, Plugin, block_capability, capability, code_of
from tests.harness import Cluster, wait_until

GiB = 1 << 30
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def create(plugin: Plugin, name: str, *, size: int = GiB, limit: int = 0, **params: str) -> csi.Volume:
    return plugin.controller.CreateVolume(csi.CreateVolumeRequest(
        name=name, volume_capabilities=[capability()], parameters=params,
        capacity_range=csi.CapacityRange(required_bytes=size, limit_bytes=limit))).volume


# -- identity ---------------------------------------------------------------------------------
def test_plugin_info_capabilities_and_probe(plugin: Plugin) -> None:
    info = plugin.identity.GetPluginInfo(csi.GetPluginInfoRequest())
    assert info.name == "csi.curvine.io" and info.vendor_version
    caps = plugin.identity.GetPluginCapabilities(csi.GetPluginCapabilitiesRequest()).capabilities
    assert [c.service.type for c in caps if c.HasField("service")] == [csi.PluginCapability.Service.CONTROLLER_SERVICE]
    assert [c.volume_expansion.type for c in caps if c.HasField("volume_expansion")] == [
        csi.PluginCapability.VolumeExpansion.ONLINE]
    assert plugin.identity.Probe(csi.ProbeRequest()).ready.value is True


def test_socket_is_private(plugin: Plugin) -> None:
    mode = os.stat(plugin.socket).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600


def test_probe_is_not_ready_while_the_master_is_down(tmp_path_factory: pytest.TempPathFactory) -> None:
    with Cluster(tmp_path_factory.mktemp("lonely"), workers=0) as lonely, \
            Plugin(tmp_path_factory.mktemp("p"), lonely.master_address, node=False) as plugin:
        assert plugin.identity.Probe(csi.ProbeRequest()).ready.value is True
        lonely.kill_master()
        assert plugin.identity.Probe(csi.ProbeRequest()).ready.value is False
        lonely.start_master()     # same port; the plugin's channel reconnects after its backoff
        wait_until(lambda: plugin.identity.Probe(csi.ProbeRequest()).ready.value, 20, "ready again")


def test_controller_advertises_exactly_what_it_serves(plugin: Plugin) -> None:
    RPC = csi.ControllerServiceCapability.RPC
    caps = plugin.controller.ControllerGetCapabilities(csi.ControllerGetCapabilitiesRequest()).capabilities
    assert sorted(c.rpc.type for c in caps) == sorted([RPC.CREATE_DELETE_VOLUME, RPC.LIST_VOLUMES, RPC.GET_CAPACITY,
                                                      RPC.EXPAND_VOLUME])


# -- create -----------------------------------------------------------------------------------
def test_create_makes_a_directory_with_policy_and_record(plugin: Plugin, cluster: Cluster) -> None:
    volume = create(plugin, "pvc-durable", size=2 * GiB, **{"class": "durable", "replicas": "1", "ttl": "2h"})
    assert volume.volume_id == volume_id("pvc-durable") and volume.capacity_bytes == 2 * GiB
    assert volume.volume_context["path"] == "/volumes/pvc-durable"
    client = cluster.client()
    assert client.fs.stat("/volumes/pvc-durable").is_dir
    policy = client.fs.get_policy("/volumes/pvc-durable").policy
    assert (policy.storage_class, policy.replicas, policy.ttl_ms) == (StorageClass.DURABLE, 1, 7_200_000)
    attr = client.master.resolve("/volumes/pvc-durable")
    assert b'"name": "pvc-durable"' in client.master.getxattr(attr.ino, RECORD_XATTR)


def test_create_is_idempotent_by_name(plugin: Plugin) -> None:
    first = create(plugin, "pvc-again", size=GiB)
    assert create(plugin, "pvc-again", size=GiB) == first
    assert create(plugin, "pvc-again", size=GiB // 2, limit=2 * GiB) == first     # the range covers it


@pytest.mark.parametrize("repeat", [
    {"size": 2 * GiB}, {"size": GiB // 2, "limit": GiB // 2}, {"size": GiB, "class": "durable"},
    {"size": GiB, "basePath": "/elsewhere"}, {"size": GiB, "onDelete": "retain"},
], ids=["bigger", "smaller-limit", "other-class", "other-base", "other-ondelete"])
def test_an_incompatible_repeat_is_already_exists(plugin: Plugin, repeat: dict[str, object]) -> None:
    name = "pvc-incompatible-" + "-".join(str(v) for v in repeat.values()).replace("/", "")
    create(plugin, name, size=GiB)
    size = int(repeat.pop("size"))     # type: ignore[call-overload]
    limit = int(repeat.pop("limit", 0))    # type: ignore[call-overload]
    with pytest.raises(grpc.RpcError) as err:
        create(plugin, name, size=size, limit=limit, **{k: str(v) for k, v in repeat.items()})
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS


def test_odd_and_maximum_length_names(plugin: Plugin, cluster: Cluster) -> None:
    odd = create(plugin, "team/a b:c", size=GiB)
    assert odd.volume_context["path"] == f"/volumes/{odd.volume_id}"     # not a file name: the id names the dir
    longest = create(plugin, "n" * 128, size=GiB)
    assert cluster.client().fs.stat(longest.volume_context["path"]).is_dir


def test_create_without_capacity_has_no_quota(plugin: Plugin) -> None:
    volume = plugin.controller.CreateVolume(csi.CreateVolumeRequest(
        name="pvc-unbounded", volume_capabilities=[capability()])).volume
    assert volume.capacity_bytes == 0


@pytest.mark.parametrize("request_, why", [
    (csi.CreateVolumeRequest(volume_capabilities=[capability()]), "no name"),
    (csi.CreateVolumeRequest(name="x" * 129, volume_capabilities=[capability()]), "name too long"),
    (csi.CreateVolumeRequest(name="v"), "no capabilities"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[block_capability()]), "block access"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability(Mode.MULTI_NODE_SINGLE_WRITER)]),
     "unsupported access mode"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability(fs_type="ext4")]), "fs type"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability()], parameters={"class": "gold"}), "class"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability()], parameters={"replicas": "0"}), "replicas"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability()], parameters={"ttl": "soon"}), "ttl"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability()], parameters={"basePath": "rel"}), "base"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability()], parameters={"basePath": "/a/../b"}),
     "base with .."),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability()], parameters={"onDelete": "shred"}),
     "onDelete"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability()], parameters={"colour": "red"}), "unknown"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability()], parameters={"maxInodes": "0"}),
     "maxInodes"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability()], parameters={"maxInodes": "many"}),
     "maxInodes not a number"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability()],
                             capacity_range=csi.CapacityRange(required_bytes=2, limit_bytes=1)), "required > limit"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability()],
                             capacity_range=csi.CapacityRange(required_bytes=-1)), "negative"),
    (csi.CreateVolumeRequest(name="v", volume_capabilities=[capability()], volume_content_source=csi.VolumeContentSource(
        snapshot=csi.VolumeContentSource.SnapshotSource(snapshot_id="s"))), "content source"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_create_requests_are_invalid_and_make_nothing(plugin: Plugin, cluster: Cluster,
                                                          request_: csi.CreateVolumeRequest, why: str) -> None:
    before = {e.path for e in cluster.client().fs.ls("/volumes")}
    assert code_of(plugin.controller.CreateVolume, request_) == INVALID, why
    assert {e.path for e in cluster.client().fs.ls("/volumes")} == before


def test_a_volume_larger_than_the_cluster_is_out_of_range(plugin: Plugin) -> None:
    request = csi.CreateVolumeRequest(name="pvc-huge", volume_capabilities=[capability()],
                                      capacity_range=csi.CapacityRange(required_bytes=1 << 50))
    assert code_of(plugin.controller.CreateVolume, request) == grpc.StatusCode.OUT_OF_RANGE


def test_a_foreign_directory_is_never_taken_over(plugin: Plugin, cluster: Cluster) -> None:
    cluster.client().fs.mkdir("/volumes/pvc-squatted", parents=True)
    request = csi.CreateVolumeRequest(name="pvc-squatted", volume_capabilities=[capability()])
    assert code_of(plugin.controller.CreateVolume, request) == grpc.StatusCode.ALREADY_EXISTS


# -- delete -----------------------------------------------------------------------------------
def test_delete_removes_the_data_and_is_idempotent(plugin: Plugin, cluster: Cluster) -> None:
    volume = create(plugin, "pvc-delete")
    client = cluster.client()
    with client.fs.open("/volumes/pvc-delete/f", "wb") as fh:
        fh.write(b"data")
    for _ in range(2):
        plugin.controller.DeleteVolume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
    assert not client.fs.exists("/volumes/pvc-delete")
    assert code_of(plugin.controller.ValidateVolumeCapabilities, csi.ValidateVolumeCapabilitiesRequest(
        volume_id=volume.volume_id, volume_capabilities=[capability()])) == grpc.StatusCode.NOT_FOUND


def test_delete_with_retain_keeps_the_data_and_a_new_volume_of_that_name_reuses_it(plugin: Plugin,
                                                                                   cluster: Cluster) -> None:
    volume = create(plugin, "pvc-retained", onDelete="retain")
    client = cluster.client()
    with client.fs.open("/volumes/pvc-retained/keep", "wb") as fh:
        fh.write(b"kept")
    plugin.controller.DeleteVolume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
    assert client.fs.exists("/volumes/pvc-retained/keep")
    listed = plugin.controller.ListVolumes(csi.ListVolumesRequest()).entries
    assert volume.volume_id not in {e.volume.volume_id for e in listed}
    again = create(plugin, "pvc-retained", onDelete="retain")
    assert again.volume_id == volume.volume_id and client.fs.exists("/volumes/pvc-retained/keep")


def test_delete_of_unknown_or_malformed_ids_succeeds(plugin: Plugin) -> None:
    for bogus in ("cv-" + "0" * 32, "reallyfakevolumeid", "../../etc"):
        plugin.controller.DeleteVolume(csi.DeleteVolumeRequest(volume_id=bogus))
    assert code_of(plugin.controller.DeleteVolume, csi.DeleteVolumeRequest()) == INVALID


# -- validate ---------------------------------------------------------------------------------
def test_validate_confirms_supported_capabilities_only(plugin: Plugin) -> None:
    volume = create(plugin, "pvc-validate")
    for mode in (Mode.SINGLE_NODE_WRITER, Mode.MULTI_NODE_MULTI_WRITER, Mode.MULTI_NODE_READER_ONLY):
        reply = plugin.controller.ValidateVolumeCapabilities(csi.ValidateVolumeCapabilitiesRequest(
            volume_id=volume.volume_id, volume_capabilities=[capability(mode)]))
        assert list(reply.confirmed.volume_capabilities) == [capability(mode)]
    refused = plugin.controller.ValidateVolumeCapabilities(csi.ValidateVolumeCapabilitiesRequest(
        volume_id=volume.volume_id, volume_capabilities=[block_capability()]))
    assert not refused.HasField("confirmed") and "block" in refused.message


def test_validate_bad_requests(plugin: Plugin) -> None:
    volume = create(plugin, "pvc-validate-bad")
    call = plugin.controller.ValidateVolumeCapabilities
    assert code_of(call, csi.ValidateVolumeCapabilitiesRequest(volume_capabilities=[capability()])) == INVALID
    assert code_of(call, csi.ValidateVolumeCapabilitiesRequest(volume_id=volume.volume_id)) == INVALID
    assert code_of(call, csi.ValidateVolumeCapabilitiesRequest(
        volume_id="cv-" + "f" * 32, volume_capabilities=[capability()])) == grpc.StatusCode.NOT_FOUND


# -- list -------------------------------------------------------------------------------------
def test_list_pages_through_every_volume_once(plugin: Plugin) -> None:
    made = {create(plugin, f"pvc-page-{i}").volume_id for i in range(7)}
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        reply = plugin.controller.ListVolumes(csi.ListVolumesRequest(max_entries=3, starting_token=token))
        assert len(reply.entries) <= 3
        seen += [e.volume.volume_id for e in reply.entries]
        pages += 1
        if not reply.next_token:
            break
        token = reply.next_token
    assert len(seen) == len(set(seen)) and made <= set(seen) and pages >= 3
    everything = plugin.controller.ListVolumes(csi.ListVolumesRequest()).entries
    assert [e.volume.volume_id for e in everything] == seen


def test_a_token_stays_valid_when_its_volume_is_deleted(plugin: Plugin) -> None:
    ids = sorted(create(plugin, f"pvc-token-{i}").volume_id for i in range(3))
    everything = [e.volume.volume_id for e in plugin.controller.ListVolumes(csi.ListVolumesRequest()).entries]
    position = everything.index(ids[0])
    first = plugin.controller.ListVolumes(csi.ListVolumesRequest(max_entries=position + 1))
    assert first.entries[-1].volume.volume_id == ids[0]
    plugin.controller.DeleteVolume(csi.DeleteVolumeRequest(volume_id=ids[0]))
    rest = plugin.controller.ListVolumes(csi.ListVolumesRequest(starting_token=first.next_token))
    assert [e.volume.volume_id for e in rest.entries] == everything[position + 1:]


def test_list_bad_requests(plugin: Plugin) -> None:
    call = plugin.controller.ListVolumes
    assert code_of(call, csi.ListVolumesRequest(starting_token="invalid-token")) == grpc.StatusCode.ABORTED
    assert code_of(call, csi.ListVolumesRequest(max_entries=-1)) == INVALID


# -- capacity and expansion -------------------------------------------------------------------
def test_get_capacity_is_the_cluster_free_space(plugin: Plugin, cluster: Cluster) -> None:
    reply = plugin.controller.GetCapacity(csi.GetCapacityRequest(volume_capabilities=[capability()]))
    df = cluster.client().fs.df()
    assert reply.available_capacity == df.available and reply.maximum_volume_size.value == df.capacity
    assert plugin.controller.GetCapacity(csi.GetCapacityRequest(
        volume_capabilities=[block_capability()])).available_capacity == 0
    assert code_of(plugin.controller.GetCapacity, csi.GetCapacityRequest(parameters={"class": "gold"})) == INVALID


def test_expand_raises_the_capacity_and_never_shrinks(plugin: Plugin) -> None:
    volume = create(plugin, "pvc-grow", size=GiB)
    grown = plugin.controller.ControllerExpandVolume(csi.ControllerExpandVolumeRequest(
        volume_id=volume.volume_id, capacity_range=csi.CapacityRange(required_bytes=2 * GiB)))
    assert grown.capacity_bytes == 2 * GiB and not grown.node_expansion_required
    again = plugin.controller.ControllerExpandVolume(csi.ControllerExpandVolumeRequest(
        volume_id=volume.volume_id, capacity_range=csi.CapacityRange(required_bytes=GiB)))
    assert again.capacity_bytes == 2 * GiB
    listed = {e.volume.volume_id: e.volume for e in plugin.controller.ListVolumes(csi.ListVolumesRequest()).entries}
    assert listed[volume.volume_id].capacity_bytes == 2 * GiB


def test_expand_bad_requests(plugin: Plugin) -> None:
    volume = create(plugin, "pvc-grow-bad")
    call = plugin.controller.ControllerExpandVolume
    size = csi.CapacityRange(required_bytes=2 * GiB)
    assert code_of(call, csi.ControllerExpandVolumeRequest(capacity_range=size)) == INVALID
    assert code_of(call, csi.ControllerExpandVolumeRequest(volume_id=volume.volume_id)) == INVALID
    assert code_of(call, csi.ControllerExpandVolumeRequest(volume_id="cv-" + "a" * 32, capacity_range=size)) == \
        grpc.StatusCode.NOT_FOUND
    assert code_of(call, csi.ControllerExpandVolumeRequest(volume_id=volume.volume_id, capacity_range=size,
                                                           volume_capability=block_capability())) == INVALID


def test_the_log_never_shows_secrets(plugin: Plugin) -> None:
    plugin.controller.CreateVolume(csi.CreateVolumeRequest(
        name="pvc-secret", volume_capabilities=[capability()], secrets={"password": "hunter2-secret"}))
    plugin.controller.DeleteVolume(csi.DeleteVolumeRequest(volume_id=volume_id("pvc-secret"),
                                                           secrets={"password": "hunter2-secret"}))
    assert "pvc-secret" in plugin.log and "***stripped***" in plugin.log
    assert "hunter2-secret" not in plugin.log


def test_unoffered_rpcs_are_unimplemented(plugin: Plugin) -> None:
    call = plugin.channel.unary_unary("/csi.v1.Controller/ControllerPublishVolume",  # type: ignore[union-attr]
                                      request_serializer=lambda m: b"", response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as err:
        call(b"")
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_a_quota_on_the_base_path_bounds_capacity_and_volume_size(plugin: Plugin, cluster: Cluster) -> None:
    MiB = 1 << 20
    client = cluster.client()
    client.fs.mkdir("/tenant-a", parents=True)
    client.fs.set_quota("/tenant-a", max_bytes=100 * MiB)
    params = {"basePath": "/tenant-a/volumes"}             # below the quota, not made yet
    reply = plugin.controller.GetCapacity(csi.GetCapacityRequest(volume_capabilities=[capability()],
                                                                 parameters=params))
    assert reply.maximum_volume_size.value == 100 * MiB and reply.available_capacity <= 100 * MiB
    too_big = csi.CreateVolumeRequest(name="pvc-tenant-big", volume_capabilities=[capability()], parameters=params,
                                      capacity_range=csi.CapacityRange(required_bytes=200 * MiB))
    assert code_of(plugin.controller.CreateVolume, too_big) == grpc.StatusCode.OUT_OF_RANGE
    volume = create(plugin, "pvc-tenant", size=50 * MiB, **params)
    assert volume.volume_context["path"] == "/tenant-a/volumes/pvc-tenant"
    grow = csi.ControllerExpandVolumeRequest(volume_id=volume.volume_id,
                                             capacity_range=csi.CapacityRange(required_bytes=200 * MiB))
    assert code_of(plugin.controller.ControllerExpandVolume, grow) == grpc.StatusCode.OUT_OF_RANGE
    assert cluster.client().fs.quota("/tenant-a/volumes/pvc-tenant").max_bytes == 50 * MiB   # unchanged
