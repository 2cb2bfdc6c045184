"""Moving a volume's mount process out of the node plugin's cgroup (issue 23: a restart or an
upgrade of the plugin container ended every FUSE process on the node). A container runtime stops
a container by killing every process in the container's cgroup, whatever its session; a process
moved to a cgroup of its own is not in it, so the mounts outlive the plugin container and the
next plugin adopts them from the node state.

`--mount-cgroup NAME` names that cgroup below `--cgroup-root` (the host's cgroup file system,
mounted into the plugin container; the plugin needs `hostPID: true`): on cgroup v2 it is
ROOT/NAME, on v1 ROOT/<hierarchy>/NAME in every hierarchy. The mounts' memory and CPU are then
accounted to that cgroup, not to the plugin container's limits.
"""
from __future__ import annotations

import logging
import os

from curvine_py.csi.errors import internal

log = logging.getLogger(__name__)


def cgroup_dirs(root: str, name: str) -> list[str]:
    """The cgroup dirs a mount process is moved to (made if missing)."""
    if not name or "/" in name or name in (".", ".."):
        raise internal(f"--mount-cgroup {name!r}: a plain cgroup name is needed")
    if os.path.exists(os.path.join(root, "cgroup.procs")):
        hierarchies = [root]                       # v2 (or a single v1 hierarchy)
    else:
        hierarchies = sorted(os.path.join(root, d) for d in os.listdir(root)
                             if os.path.exists(os.path.join(root, d, "cgroup.procs"))
                             and not os.path.islink(os.path.join(root, d)))
    if not hierarchies:
        raise internal(f"--cgroup-root {root}: no cgroup file system there")
    dirs = []
    for hierarchy in hierarchies:
        path = os.path.join(hierarchy, name)
        os.makedirs(path, exist_ok=True)
        dirs.append(path)
    return dirs


def move_out(pid: int, dirs: list[str]) -> None:
    """Moves `pid` into every dir of `dirs`; INTERNAL if none takes it (the mount would die with the plugin)."""
    moved = 0
    for path in dirs:
        try:
            with open(os.path.join(path, "cgroup.procs"), "w") as fh:
                fh.write(str(pid))
            moved += 1
        except OSError as exc:
            log.warning("could not move mount pid %d into %s: %s", pid, path, exc.strerror)
    if dirs and not moved:
        raise internal(f"mount pid {pid} could not be moved out of the plugin's cgroup into any of {dirs}")
