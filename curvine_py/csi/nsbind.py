"""Recovery inside mount namespaces that propagation does not reach (containers with the default
private propagation), as seaweedfs-csi does: find every process whose mount namespace still holds
a mount of the dead FUSE device (its major:minor in /proc/PID/mountinfo), clone the recovered
volume (open_tree(OPEN_TREE_CLONE), in the plugin's namespace) and, in a one-thread helper process
that joins the namespace (setns(CLONE_NEWNS) refuses a multi-threaded caller), move the clone onto
each dead mount point (move_mount). Stacked, never unmounted: the pod never sees the bare dir.

It needs the pods' processes in sight (`hostPID: true` for the node plugin) and Linux >= 5.2.
A namespace it cannot repair is logged: that pod must be restarted to see its volume again.

    python -m curvine_py.csi.nsbind PID FD:PATH [FD:PATH ...]     (the helper; fds passed open)
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import subprocess
import sys
from dataclasses import dataclass

from curvine_py.csi.bindmounts import BROKEN_ERRNOS

log = logging.getLogger(__name__)

SYS_OPEN_TREE = 428            # the same number on every architecture (the unified syscall table)
SYS_MOVE_MOUNT = 429
OPEN_TREE_CLONE = 1
AT_FDCWD = -100
MOVE_MOUNT_F_EMPTY_PATH = 4
CLONE_NEWNS = 0x00020000
HELPER_TIMEOUT_S = 20.0

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


@dataclass(frozen=True, slots=True)
class DeadMount:
    pid: int                 # a process in the namespace
    path: str                # the mount point, as that process sees it
    root: str                # the part of the volume mounted there ("/" or a subPath)
    read_only: bool


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def dead_mounts(device: str) -> list[DeadMount]:
    """The mounts of `device` in every other mount namespace, one process per namespace."""
    own = os.stat("/proc/self/ns/mnt").st_ino
    seen = {own}
    found: list[DeadMount] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ns = os.stat(f"/proc/{entry}/ns/mnt").st_ino
            if ns in seen:
                continue
            seen.add(ns)
            with open(f"/proc/{entry}/mountinfo") as fh:
                lines = fh.readlines()
        except OSError:
            continue          # gone, or a kernel thread
        for line in lines:
            fields = line.split()
            if len(fields) > 5 and fields[2] == device:
                found.append(DeadMount(int(entry), _unescape(fields[4]), _unescape(fields[3]),
                                       "ro" in fields[5].split(",")))
    return found


def open_tree_clone(path: str) -> int:
    fd = _libc.syscall(SYS_OPEN_TREE, AT_FDCWD, path.encode(), OPEN_TREE_CLONE)
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"open_tree {path}: {os.strerror(code)}")
    return int(fd)


def repair(device: str, rw_source: str, ro_source: str) -> tuple[int, int]:
    """Stacks the recovered volume on its dead mounts in other namespaces; (repaired, failed)."""
    if not device:
        return 0, 0
    by_pid: dict[int, list[DeadMount]] = {}
    for mount in dead_mounts(device):
        by_pid.setdefault(mount.pid, []).append(mount)
    repaired = failed = 0
    for pid, mounts in by_pid.items():
        fds: list[int] = []
        try:
            for mount in mounts:
                source = ro_source if mount.read_only else rw_source
                fds.append(open_tree_clone(os.path.join(source, mount.root.lstrip("/"))))
            argv = [sys.executable, "-m", "curvine_py.csi.nsbind", str(pid),
                    *(f"{fd}:{mount.path}" for fd, mount in zip(fds, mounts, strict=True))]
            result = subprocess.run(argv, pass_fds=fds, capture_output=True, text=True, timeout=HELPER_TIMEOUT_S,
                                    check=False)
            for line in result.stdout.splitlines():
                if line.startswith("repaired "):
                    repaired += 1
                    log.info("pid %d's namespace: %s", pid, line)
                elif line.startswith("failed "):
                    failed += 1
                    log.error("pid %d's namespace: %s: that pod must be restarted", pid, line)
            if result.returncode != 0:
                failed += 1
                log.error("pid %d's namespace: helper exit %d: %s: its pod must be restarted", pid,
                          result.returncode, result.stderr.strip()[-500:])
        except (OSError, subprocess.SubprocessError) as exc:
            failed += 1
            log.error("pid %d's namespace: %s: its pod must be restarted", pid, exc)
        finally:
            for fd in fds:
                os.close(fd)
    return repaired, failed


def _helper(argv: list[str]) -> int:
    pid = int(argv[0])
    ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
    root = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY)
    if _libc.setns(ns, CLONE_NEWNS) != 0:
        code = ctypes.get_errno()
        print(f"setns: {os.strerror(code)}", file=sys.stderr)
        return 1
    os.fchdir(root)
    os.chroot(".")            # the paths of mountinfo are relative to the process's root
    for pair in argv[1:]:
        fd_text, _, path = pair.partition(":")
        try:
            os.stat(path)
            print(f"healthy {path}")         # propagation got there first (an rslave container)
            continue
        except OSError as exc:
            if exc.errno not in BROKEN_ERRNOS:
                print(f"failed {path}: {exc.strerror}")
                continue
        result = _libc.syscall(SYS_MOVE_MOUNT, int(fd_text), b"", AT_FDCWD, path.encode(), MOVE_MOUNT_F_EMPTY_PATH)
        if result != 0:
            print(f"failed {path}: move_mount: {os.strerror(ctypes.get_errno())}")
        else:
            print(f"repaired {path}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(errno.EINVAL)
    sys.exit(_helper(sys.argv[1:]))
