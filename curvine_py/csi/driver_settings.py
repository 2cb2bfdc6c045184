"""The driver's settings (from `curvine-py csi` flags), one frozen value shared by every service."""
from __future__ import annotations

from dataclasses import dataclass

from curvine_py.csi.catalog import DEFAULT_INDEX_DIR
from curvine_py.csi.identity import DRIVER_NAME
from curvine_py.csi.volumes import DEFAULT_BASE_PATH


@dataclass(frozen=True, slots=True)
class DriverSettings:
    node_id: str
    controller: bool
    node: bool
    master: str
    token: str = ""
    name: str = DRIVER_NAME
    base_path: str = DEFAULT_BASE_PATH
    index_dir: str = DEFAULT_INDEX_DIR
    state_dir: str = "/var/lib/curvine-csi"
    max_volumes: int = 0
    mount_args: tuple[str, ...] = ()
    path_roots: tuple[str, ...] = ("/var/lib/kubelet",)   # staging and target paths must lie below one
    mount_cgroup: str = ""                 # a cgroup the mounts are moved to ("": they stay in the plugin's)
    cgroup_root: str = "/sys/fs/cgroup"
    recovery_interval_s: float = 1.0     # how often dead mounts are looked for (the issue asks: noticed within 2 s)
