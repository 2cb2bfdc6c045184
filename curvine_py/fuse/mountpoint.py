"""The mountpoint before and after mounting: stale FUSE mounts, lazy unmount, kernel tunables.

A mount process killed without unmounting leaves its mountpoint answering every access with
ENOTCONN ("Transport endpoint is not connected"); the kernel cannot re-attach it to a new process
(the most reported failure of FUSE CSI drivers). `prepare` detects it and says so; with --force it
detaches the dead mount (lazy unmount) so a new one can take its place.
"""
from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess

from curvine_py.core.errors import CurvineError

log = logging.getLogger(__name__)


class MountpointError(CurvineError):
    errno = errno.EBUSY


def state(path: str) -> str:
    """'stale' (dead FUSE mount), 'mounted' (a live mount), 'dir', 'missing' or 'not-a-dir'."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENOTCONN:
            return "stale"
        if exc.errno == errno.ENOENT:
            return "missing"
        raise MountpointError(f"{path}: {exc.strerror}", errno=exc.errno or errno.EIO) from None
    if is_mounted(path):
        return "mounted"
    return "dir" if os.path.isdir(path) and st else "not-a-dir"


def is_mounted(path: str) -> bool:
    """True if `path` is a mount point in /proc/self/mountinfo (works for stale mounts too)."""
    target = os.path.abspath(path)
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 4 and _unescape(fields[4]) == target:
                    return True
    except OSError:
        return os.path.ismount(path)
    return False


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def lazy_unmount(path: str) -> None:
    """Detach a (stale or live) mount: fusermount3 -u -z, falling back to umount -l (root)."""
    for command in (["fusermount3", "-u", "-z", path], ["umount", "-l", path]):
        if shutil.which(command[0]) is None:
            continue
        result = subprocess.run(command, check=False, capture_output=True, text=True)
        if result.returncode == 0 and not is_mounted(path):
            log.info("detached the previous mount at %s (%s)", path, command[0])
            return
    if is_mounted(path):
        raise MountpointError(f"{path}: could not detach the previous mount")


def prepare(path: str, *, force: bool) -> None:
    """Checks that `path` can be mounted on; with `force`, detaches a stale or live mount first."""
    found = state(path)
    if found == "stale":
        if not force:
            raise MountpointError(
                f"{path} is a stale FUSE mount (Transport endpoint is not connected): the process that "
                f"served it died. Run `curvine-py mount --force ...` to detach it and mount again "
                f"(or `fusermount3 -u -z {path}`).", errno=errno.ENOTCONN)
        log.warning("%s is a stale mount: detaching it (--force)", path)
        lazy_unmount(path)
        found = state(path)
    if found == "mounted":
        if not force:
            raise MountpointError(f"{path} is already a mount point (use --force to replace it)")
        log.warning("%s is already mounted: detaching it (--force)", path)
        lazy_unmount(path)
        found = state(path)
    if found == "missing":
        raise MountpointError(f"{path}: no such directory", errno=errno.ENOENT)
    if found != "dir":
        raise MountpointError(f"{path}: not a directory", errno=errno.ENOTDIR)


def tune(path: str, *, read_ahead_kb: int, max_background: int) -> None:
    """Raises the mount's read-ahead (bdi read_ahead_kb: the kernel default of 128 KiB caps reads
    at 128 KiB requests) and the number of requests the kernel keeps in flight. Best effort: needs
    root, and a failure only costs speed."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    _mount_fusectl()
    settings = [(f"/sys/class/bdi/{major}:{minor}/read_ahead_kb", read_ahead_kb)]
    if max_background > 0:
        settings += [(f"/sys/fs/fuse/connections/{minor}/max_background", max_background),
                     (f"/sys/fs/fuse/connections/{minor}/congestion_threshold", max(1, max_background * 3 // 4))]
    for file, value in settings:
        try:
            with open(file, "w") as fh:
                fh.write(f"{value}\n")
        except OSError as exc:
            log.debug("could not set %s to %s: %s", file, value, exc.strerror or exc)


def _mount_fusectl() -> None:
    """The per-connection FUSE knobs live in fusectl, which systemd mounts at boot and containers
    usually do not: mount it if it is missing (root only, harmless if it fails)."""
    where = "/sys/fs/fuse/connections"
    if not os.path.isdir(where) or os.listdir(where) or os.geteuid() != 0:
        return
    subprocess.run(["mount", "-t", "fusectl", "fusectl", where], check=False, capture_output=True)
