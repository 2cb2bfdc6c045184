"""Deployment artefacts that cannot run here (no Docker engine, no Kubernetes) are at least valid
and coherent: every manifest and docker-compose.yml parses, uses real apiVersion/kind pairs,
names only curvine-py subcommands and flags its own parsers accept, and the CSI pieces agree with
each other (driver name, socket paths between the registrar, the sidecars and the plugin, RBAC
verbs the sidecars need, StorageClass parameters the controller accepts)."""
from __future__ import annotations

import argparse
import pathlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from curvine_py.cli.common import add_client_options
from curvine_py.cli.main import SUBCOMMANDS
from curvine_py.core.errors import CurvineError
from curvine_py.csi import main as csi_main
from curvine_py.csi.identity import DRIVER_NAME
from curvine_py.csi.volumes import parse_parameters
from curvine_py.fuse import options as mount_options
from curvine_py.master import main as master_main
from curvine_py.worker import main as worker_main

ROOT = pathlib.Path(__file__).resolve().parents[2]
CSI = ROOT / "csi"
MANIFESTS = sorted([*CSI.glob("*.yaml"), *(CSI / "examples").glob("*.yaml")])
IMAGE = "curvine-py"

# The apiVersion of every kind the manifests may use (current, not deprecated).
API_VERSIONS = {
    "Namespace": "v1", "ServiceAccount": "v1", "Service": "v1", "ConfigMap": "v1", "Secret": "v1",
    "PersistentVolumeClaim": "v1", "Deployment": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1",
    "CSIDriver": "storage.k8s.io/v1", "StorageClass": "storage.k8s.io/v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1", "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "Role": "rbac.authorization.k8s.io/v1", "RoleBinding": "rbac.authorization.k8s.io/v1",
    "Kustomization": "kustomize.config.k8s.io/v1beta1",
}


def _report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py report")
    add_client_options(p)
    p.add_argument("--json", action="store_true")
    return p


# subcommand -> a function that parses its arguments the way the subcommand does (SystemExit on bad flags)
PARSERS: dict[str, Callable[[list[str]], Any]] = {
    "csi": csi_main.parse,
    "master": master_main.parse_args,
    "worker": lambda argv: worker_main.build_parser().parse_args(argv),
    "mount": mount_options.parse,
    "report": lambda argv: _report_parser().parse_args(argv),
}


def documents() -> list[tuple[str, dict[str, Any]]]:
    return [(path.relative_to(ROOT).as_posix(), doc) for path in MANIFESTS
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in documents() if doc["kind"] == kind]


def one(kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in of_kind(kind) if d["metadata"]["name"] == name]
    return found


def pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for source, doc in documents():
        if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            yield f"{source}:{doc['metadata']['name']}", doc["spec"]["template"]["spec"]


def container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [c for c in spec["containers"] if c["name"] == name]
    return found


def flag(args: list[str], name: str) -> str:
    for i, arg in enumerate(args):
        if arg == name:
            return str(args[i + 1])
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise KeyError(name)


def mount_path(spec_container: dict[str, Any], volume: str) -> str:
    [path] = [m["mountPath"] for m in spec_container.get("volumeMounts", []) if m["name"] == volume]
    return str(path)


def volume_for(spec: dict[str, Any], spec_container: dict[str, Any], path: str) -> dict[str, Any]:
    """The pod volume mounted at `path` or at the closest directory above it."""
    mounts = sorted(spec_container["volumeMounts"], key=lambda m: len(m["mountPath"]), reverse=True)
    [name] = [m["name"] for m in mounts if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")][:1]
    [volume] = [v for v in spec["volumes"] if v["name"] == name]
    return dict(volume)


def check_command(where: str, command: list[str]) -> None:
    assert command[0] == "curvine-py" and command[1] in SUBCOMMANDS, where
    argv = [a.replace("$(NODE_NAME)", "node-1") for a in command[2:]]
    PARSERS[command[1]](argv)       # raises (SystemExit or CurvineError) on a flag curvine-py does not have


# -- every file -------------------------------------------------------------------------------
def test_manifests_parse_with_real_api_versions() -> None:
    found = documents()
    assert len(MANIFESTS) >= 10 and found
    for source, doc in found:
        assert doc["apiVersion"] == API_VERSIONS[doc["kind"]], (source, doc["kind"])
        if doc["kind"] != "Kustomization":
            assert doc["metadata"]["name"], source


def test_kustomization_lists_every_manifest_and_sets_the_image() -> None:
    kustomization = yaml.safe_load((CSI / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in CSI.glob("*.yaml")} - {"kustomization.yaml"}
    assert [i["name"] for i in kustomization["images"]] == [IMAGE]


def test_curvine_containers_run_real_subcommands_with_real_flags() -> None:
    checked = 0
    for where, spec in pod_specs():
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            if c["image"].split(":")[0] == IMAGE:
                assert "args" not in c, where
                check_command(f"{where}/{c['name']}", c["command"])
                checked += 1
    assert checked == 4         # master, node plugin, worker, controller plugin
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name, service in compose["services"].items():
        if service.get("image", "").split(":")[0] != IMAGE:
            continue            # PostgreSQL's own image
        check_command(name, service["command"])
        if "healthcheck" in service:
            check_command(f"{name} healthcheck", service["healthcheck"]["test"][1:])


@pytest.mark.parametrize("command", [
    ["curvine-py", "csi", "--node", "--endpoint", "unix:///csi/csi.sock", "--node-id", "n", "--master", "m:1",
     "--socket-mode", "0666"],                                       # a flag csi does not have
    ["curvine-py", "csi", "--endpoint", "unix:///csi/csi.sock", "--node-id", "n", "--master", "m:1"],  # no role
    ["curvine-py", "worker", "--master", "m:1", "--datadir", "/d"],   # a misspelt flag
    ["curvine-py", "provisioner", "--master", "m:1"],                 # no such subcommand
])
def test_the_command_check_catches_bad_commands(command: list[str]) -> None:
    with pytest.raises((SystemExit, AssertionError, CurvineError)):
        check_command("bad", command)


def test_compose_file_is_valid_and_coherent() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "master-1", "master-2", "worker-1", "worker-2", "mount", "csi"} <= set(services)
    masters = ",".join(f"{name}:{flag(services[name]['command'], '--port')}" for name in ("master-1", "master-2"))
    for name in ("master-1", "master-2"):
        command = services[name]["command"]
        master_main.parse_args(command[2:])
        assert flag(command, "--meta").startswith("postgresql://curvine@postgres:5432/"), name
        assert flag(command, "--advertise") == f"{name}:{flag(command, '--port')}", name
        assert "pg-password" in services[name]["secrets"]
        assert flag(command, "--meta-password-file") == "/run/secrets/pg-password"
    assert "pg-password" in services["postgres"]["secrets"] and "pg-password" in compose["secrets"]
    for name in ("worker-1", "worker-2", "mount", "csi"):
        command = services[name]["command"]
        assert flag(command, "--master") == masters, name
    assert (ROOT / services["master-1"]["build"]["dockerfile"]).exists()
    csi_service = services["csi"]
    endpoint = flag(csi_service["command"], "--endpoint").removeprefix("unix://")
    assert any(v.split(":")[1] == str(pathlib.PurePath(endpoint).parent) for v in csi_service["volumes"])
    assert "/dev/fuse:/dev/fuse" in csi_service["devices"] and csi_service["privileged"] is True


def test_dockerfile_builds_the_package_with_fuse() -> None:
    text = (CSI / "Dockerfile").read_text()
    assert "fuse3" in text and "pip install" in text and "COPY curvine_py" in text


def test_dockerfile_installs_only_from_the_hash_lock() -> None:
    lines = " ".join((CSI / "Dockerfile").read_text().replace("\\\n", " ").splitlines())
    installs = [cmd for cmd in re.split(r"&&|RUN ", lines) if "pip install" in cmd]
    locked = [cmd for cmd in installs if "-r requirements/" in cmd]
    assert [re.search(r"-r (\S+)", c)[1] for c in locked] == ["requirements/build.txt",  # type: ignore[index]
                                                               "requirements/base.txt"]
    assert all("--require-hashes" in c and "--no-deps" in c for c in locked)
    # the package itself adds nothing the lock did not pin
    assert all("--no-deps" in c for c in installs)
    for lock in ("build.txt", "base.txt"):
        assert (ROOT / "requirements" / lock).is_file()


# -- the CSI pieces agree ---------------------------------------------------------------------
def test_driver_name_everywhere() -> None:
    driver = one("CSIDriver", DRIVER_NAME)["spec"]
    assert driver["attachRequired"] is False and driver["podInfoOnMount"] is True
    assert {sc["provisioner"] for sc in of_kind("StorageClass")} == {DRIVER_NAME}


def test_node_plugin_socket_registrar_and_kubelet_agree() -> None:
    spec = one("DaemonSet", "curvine-node")["spec"]["template"]["spec"]
    plugin, registrar = container(spec, "csi-plugin"), container(spec, "node-driver-registrar")
    assert "--node" in plugin["command"] and "--controller" not in plugin["command"]
    socket = flag(plugin["command"], "--endpoint").removeprefix("unix://")
    assert flag(registrar["args"], "--csi-address") == socket
    assert flag(container(spec, "liveness-probe")["args"], "--csi-address") == socket
    socket_dir = str(pathlib.PurePath(socket).parent)
    plugin_volume = volume_for(spec, plugin, socket)
    assert volume_for(spec, registrar, socket) == plugin_volume
    host_socket = plugin_volume["hostPath"]["path"] + socket.removeprefix(socket_dir)
    assert flag(registrar["args"], "--kubelet-registration-path") == host_socket
    assert host_socket == f"/var/lib/kubelet/plugins/{DRIVER_NAME}/csi.sock"
    assert volume_for(spec, registrar, "/registration")["hostPath"]["path"] == "/var/lib/kubelet/plugins_registry"
    # bind mounts into pod dirs must reach the host: privileged, Bidirectional on the kubelet dir
    assert plugin["securityContext"]["privileged"] is True
    [kubelet] = [m for m in plugin["volumeMounts"] if m["mountPath"] == "/var/lib/kubelet"]
    assert kubelet["mountPropagation"] == "Bidirectional"
    assert volume_for(spec, plugin, "/dev/fuse")["hostPath"]["path"] == "/dev/fuse"
    state_dir = flag(plugin["command"], "--state-dir")
    assert "hostPath" in volume_for(spec, plugin, state_dir)     # node-local state survives the container
    token_file = flag(plugin["command"], "--token-file")
    assert "secret" in volume_for(spec, plugin, token_file)


def test_node_worker_stores_on_a_host_dir() -> None:
    """The first data dir holds the worker's id (worker.id): on the node's hostPath, a recreated
    pod comes back as the same worker and its cached blocks are not orphaned (Curvine #1519)."""
    spec = one("DaemonSet", "curvine-node")["spec"]["template"]["spec"]
    worker = container(spec, "worker")
    data_dir = flag(worker["command"], "--data-dir").split(":")[0]
    assert "hostPath" in volume_for(spec, worker, data_dir)
    assert "emptyDir" not in volume_for(spec, worker, data_dir)
    assert any(e["name"] == "CURVINE_TOKEN" and "secretKeyRef" in e["valueFrom"] for e in worker["env"])


def test_controller_sidecars_share_the_plugin_socket() -> None:
    spec = one("Deployment", "curvine-csi-controller")["spec"]["template"]["spec"]
    plugin = container(spec, "csi-plugin")
    assert "--controller" in plugin["command"] and "--node" not in plugin["command"]
    socket = flag(plugin["command"], "--endpoint").removeprefix("unix://")
    for name in ("csi-provisioner", "csi-resizer", "liveness-probe"):
        sidecar = container(spec, name)
        assert flag(sidecar["args"], "--csi-address") == socket, name
        assert volume_for(spec, sidecar, socket) == volume_for(spec, plugin, socket), name
    images = {c["name"]: c["image"] for c in spec["containers"]}
    assert images["csi-provisioner"].startswith("registry.k8s.io/sig-storage/csi-provisioner:v")
    assert images["csi-resizer"].startswith("registry.k8s.io/sig-storage/csi-resizer:v")


def test_master_keeps_its_database_on_a_claim() -> None:
    master = one("StatefulSet", "curvine-master")["spec"]
    command = master["template"]["spec"]["containers"][0]["command"]
    [claim] = master["volumeClaimTemplates"]
    mounted = mount_path(master["template"]["spec"]["containers"][0], claim["metadata"]["name"])
    assert flag(command, "--data-dir") == mounted
    service = one("Service", master["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    address = f"{master['serviceName']}-0.{master['serviceName']}.curvine.svc:{flag(command, '--port')}"
    for _, spec in pod_specs():
        for c in spec["containers"]:
            if c["image"].split(":")[0] == IMAGE and "--master" in c["command"]:
                assert flag(c["command"], "--master") == address


def rules_of(kind: str, name: str) -> dict[tuple[str, str], set[str]]:
    rules: dict[tuple[str, str], set[str]] = {}
    for rule in one(kind, name)["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                rules.setdefault((group, resource), set()).update(rule["verbs"])
    return rules


@pytest.mark.parametrize("role, needed", [
    ("curvine-csi-provisioner", {("", "persistentvolumes"): {"get", "list", "watch", "create", "delete"},
                                 ("", "persistentvolumeclaims"): {"get", "list", "watch", "update"},
                                 ("storage.k8s.io", "storageclasses"): {"get", "list", "watch"},
                                 ("", "events"): {"create", "patch"},
                                 ("storage.k8s.io", "csinodes"): {"get", "list", "watch"},
                                 ("", "nodes"): {"get", "list", "watch"}}),
    ("curvine-csi-resizer", {("", "persistentvolumes"): {"get", "list", "watch", "patch"},
                             ("", "persistentvolumeclaims"): {"get", "list", "watch"},
                             ("", "persistentvolumeclaims/status"): {"patch"},
                             ("", "events"): {"create", "patch"}}),
])
def test_sidecars_have_the_verbs_they_need(role: str, needed: dict[tuple[str, str], set[str]]) -> None:
    granted = rules_of("ClusterRole", role)
    for resource, verbs in needed.items():
        assert verbs <= granted.get(resource, set()), (role, resource)
    [binding] = [b for b in of_kind("ClusterRoleBinding") if b["roleRef"]["name"] == role]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "curvine-csi-controller",
                                    "namespace": "curvine"}]
    leases = rules_of("Role", "curvine-csi-leader-election")[("coordination.k8s.io", "leases")]
    assert {"get", "create", "update"} <= leases


def test_every_pod_runs_as_an_existing_service_account() -> None:
    accounts = {a["metadata"]["name"] for a in of_kind("ServiceAccount")}
    for where, spec in pod_specs():
        if "serviceAccountName" in spec:
            assert spec["serviceAccountName"] in accounts, where


def test_storage_classes_use_parameters_the_controller_accepts() -> None:
    classes = {sc["metadata"]["name"]: sc for sc in of_kind("StorageClass")}
    assert set(classes) == {"curvine-cache", "curvine-durable"}
    cache = parse_parameters(classes["curvine-cache"]["parameters"])
    durable = parse_parameters(classes["curvine-durable"]["parameters"])
    assert (cache.storage_class, durable.storage_class, durable.on_delete) == ("cache", "durable", "retain")
    assert all(sc["allowVolumeExpansion"] for sc in classes.values())


def test_examples_use_the_rwx_claim_and_the_settings_lmcache_needs() -> None:
    claim = one("PersistentVolumeClaim", "kv-cache")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] in {sc["metadata"]["name"] for sc in of_kind("StorageClass")}
    fs_spec = one("Deployment", "vllm-lmcache-fs")["spec"]["template"]["spec"]
    [claim_volume] = [v for v in fs_spec["volumes"] if "persistentVolumeClaim" in v]
    assert claim_volume["persistentVolumeClaim"]["claimName"] == "kv-cache"
    vllm = container(fs_spec, "vllm")
    fs_config = yaml.safe_load(one("ConfigMap", "lmcache-fs")["data"]["lmcache.yaml"])
    assert fs_config["remote_url"] == "fs://localhost:0" + mount_path(vllm, claim_volume["name"])
    native_config = yaml.safe_load(one("ConfigMap", "lmcache-native")["data"]["lmcache.yaml"])
    extra = native_config["extra_config"]
    module = ROOT / (extra["remote_storage_plugin.curvine.module_path"].replace(".", "/") + ".py")
    assert f"class {extra['remote_storage_plugin.curvine.class_name']}(" in module.read_text()
    for name in ("vllm-lmcache-fs", "vllm-lmcache-native"):
        env = {e["name"]: e.get("value") for e in container(one("Deployment", name)["spec"]["template"]["spec"],
                                                             "vllm")["env"]}
        assert env["PYTHONHASHSEED"] == "0", name        # keys match across replicas only with one seed
    for config in (fs_config, native_config):
        assert config["remote_serde"] == "naive"


# -- issue 23: probes, propagation, addresses, ports ---------------------------------------------
def test_livenessprobe_sidecars_are_probed_by_their_plugin_containers() -> None:
    """A livenessprobe sidecar is inert unless a container declares a livenessProbe on its /healthz."""
    for kind, name in (("DaemonSet", "curvine-node"), ("Deployment", "curvine-csi-controller")):
        spec = one(kind, name)["spec"]["template"]["spec"]
        port = int(flag(container(spec, "liveness-probe")["args"], "--health-port"))
        plugin = container(spec, "csi-plugin")
        probe = plugin["livenessProbe"]["httpGet"]
        assert probe["path"] == "/healthz", name
        named = {p["name"]: p["containerPort"] for c in spec["containers"] for p in c.get("ports", [])}
        assert (named[probe["port"]] if isinstance(probe["port"], str) else probe["port"]) == port, name


def test_every_probe_names_a_port_its_pod_declares() -> None:
    for where, spec in pod_specs():
        ports = {p["name"]: p["containerPort"] for c in spec["containers"] for p in c.get("ports", []) if "name" in p}
        for c in spec["containers"]:
            for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
                port = c.get(kind, {}).get("httpGet", {}).get("port")
                if isinstance(port, str):
                    assert port in ports, (where, c["name"], kind)


def test_node_plugin_propagation_and_mounts_that_outlive_it() -> None:
    spec = one("DaemonSet", "curvine-node")["spec"]["template"]["spec"]
    plugin = container(spec, "csi-plugin")
    kubelet = [m for m in plugin["volumeMounts"] if m["mountPath"] == "/var/lib/kubelet"]
    assert kubelet and kubelet[0]["mountPropagation"] == "Bidirectional"
    assert spec["hostPID"] is True                     # cgroup move, and re-binds inside pods' namespaces
    root = flag(plugin["command"], "--cgroup-root")
    assert flag(plugin["command"], "--mount-cgroup")
    assert volume_for(spec, plugin, root)["hostPath"]["path"] == "/sys/fs/cgroup"
    assert plugin["securityContext"]["privileged"] is True


def test_pods_of_the_examples_mount_curvine_volumes_host_to_container() -> None:
    claims = {d["metadata"]["name"] for d in of_kind("PersistentVolumeClaim")}
    checked = 0
    for where, spec in pod_specs():
        pvc_volumes = {v["name"] for v in spec.get("volumes", [])
                       if v.get("persistentVolumeClaim", {}).get("claimName") in claims}
        for c in spec["containers"]:
            for m in c.get("volumeMounts", []):
                if m["name"] in pvc_volumes:
                    assert m.get("mountPropagation") == "HostToContainer", (where, c["name"], m["name"])
                    checked += 1
    assert checked >= 1


def test_workers_on_host_network_advertise_the_host_ip_and_expose_metrics() -> None:
    template = one("DaemonSet", "curvine-node")["spec"]["template"]
    spec = template["spec"]
    worker = container(spec, "worker")
    assert spec["hostNetwork"] is True
    host = flag(worker["command"], "--host")
    assert host == "$(HOST_IP)"                      # not 0.0.0.0: that advertises gethostbyname(hostname)
    env = {e["name"]: e for e in worker["env"]}
    assert env["HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    ports = {p["name"]: p["containerPort"] for p in worker["ports"]}
    assert ports["data"] == int(flag(worker["command"], "--port"))
    assert ports["metrics"] == int(flag(worker["command"], "--metrics-port"))
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == ports["metrics"]
