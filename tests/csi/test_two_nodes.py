"""One ReadWriteMany volume, two nodes: a node plugin per network namespace (tests/netns.py, the
cluster on the bridge address with a token), each staging the volume with its own FUSE mount and
publishing it to a "pod" target; what one pod writes the other reads whole, both ways."""
from __future__ import annotations

import pathlib

from curvine_py.proto.csi.v1 import csi_pb2 as csi
from tests.csi.plugin import Mode, Plugin, capability
from tests.csi.test_node import publish, stage, unpublish, unstage
from tests.harness import Cluster, random_bytes
from tests.netns import network_namespaces, requires_netns

TOKEN = "csi-two-node-token"
MiB = 1 << 20
RWX = Mode.MULTI_NODE_MULTI_WRITER


@requires_netns()
def test_two_pods_on_two_nodes_share_one_rwx_volume(tmp_path: pathlib.Path) -> None:
    with network_namespaces(2) as lab:
        host = ["--host", lab.root_address]
        with Cluster(tmp_path / "cluster", workers=2, token=TOKEN, master_args=host, worker_args=host,
                     node_names=["host0", "host1"]) as cluster:
            plugins = [Plugin(tmp_path / f"plugin-{i}", cluster.master_address, controller=i == 0,
                              node_id=f"host{i}", token=TOKEN, prefix=["nsenter", f"--net=/run/netns/{ns.name}"])
                       for i, ns in enumerate(lab)]
            with plugins[0] as a, plugins[1] as b:
                volume_id = a.controller.CreateVolume(csi.CreateVolumeRequest(
                    name="pvc-shared", volume_capabilities=[capability(RWX)],
                    capacity_range=csi.CapacityRange(required_bytes=64 * MiB))).volume.volume_id
                pods = []
                for i, plugin in enumerate((a, b)):
                    staging, target = tmp_path / f"staging-{i}", tmp_path / f"pod-{i}" / "volume"
                    staging.mkdir()
                    target.parent.mkdir()
                    stage(plugin, volume_id, staging, RWX)
                    publish(plugin, volume_id, staging, target, mode=RWX)
                    pods.append((plugin, staging, target))
                (_, _, pod_a), (_, _, pod_b) = pods
                payload = random_bytes(5 * MiB + 7, seed=3)
                (pod_a / "from-a").write_bytes(payload)
                assert (pod_b / "from-a").read_bytes() == payload
                (pod_b / "from-b").write_bytes(payload[::-1])
                assert (pod_a / "from-b").read_bytes() == payload[::-1]
                for plugin, staging, target in pods:
                    unpublish(plugin, volume_id, target)
                    unstage(plugin, volume_id, staging)
                with cluster.client().fs.open("/volumes/pvc-shared/from-a") as fh:
                    assert fh.read() == payload
