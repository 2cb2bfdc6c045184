"""mount(2)/umount2(2) for the node plugin's bind mounts (no `mount` binary needed in the image):
binds, propagation changes, detaching every layer of a stacked mount point, and the stat errors
that mean a mount is broken (ceph-csi's set)."""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os

from curvine_py.core.errors import CurvineError
from curvine_py.fuse.mountpoint import is_mounted

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MS_SHARED = 1 << 20
MNT_DETACH = 2
# stat errors that mean the mount behind a path is broken, not the path missing
BROKEN_ERRNOS = frozenset({errno.ENOTCONN, errno.ESTALE, errno.EIO, errno.EHOSTDOWN, errno.ECONNABORTED})
MAX_LAYERS = 64          # a mount point never has more stacked mounts than this (a loop guard)

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


class MountFailed(CurvineError):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise MountFailed(f"{what}: {os.strerror(code)}", errno=code)


def bind(source: str, target: str, *, read_only: bool) -> None:
    """Bind-mounts `source` on `target`; read-only takes a second remount (the kernel ignores
    MS_RDONLY on the first MS_BIND)."""
    _check(_libc.mount(source.encode(), target.encode(), None, MS_BIND, None), f"bind {source} -> {target}")
    if read_only:
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        result = _libc.mount(None, target.encode(), None, flags, None)
        if result != 0:
            code = ctypes.get_errno()
            detach(target)
            raise MountFailed(f"read-only remount of {target}: {os.strerror(code)}", errno=code)


def set_propagation(path: str, flag: int) -> None:
    """MS_SHARED, MS_SLAVE or MS_PRIVATE on the top mount at `path` (not recursive)."""
    _check(_libc.mount(None, path.encode(), None, flag, None), f"propagation of {path}")


def broken(path: str) -> bool:
    """True if `path` is a mount whose file system no longer answers (a dead FUSE mount)."""
    try:
        os.stat(path)
        return False
    except OSError as exc:
        return exc.errno in BROKEN_ERRNOS


def device_of(path: str) -> str:
    """major:minor of the file system mounted at `path`, as /proc/*/mountinfo writes it."""
    dev = os.stat(path).st_dev
    return f"{os.major(dev)}:{os.minor(dev)}"


def detach_all(path: str) -> None:
    """Detaches every mount stacked on `path` (a recovered mount point has one per recovery)."""
    for _ in range(MAX_LAYERS):
        if not is_mounted(path):
            return
        detach(path)
    raise MountFailed(f"{path} still mounted after {MAX_LAYERS} unmounts", errno=errno.EBUSY)


def detach(path: str) -> None:
    """Lazy unmount (MNT_DETACH): works for dead FUSE mounts too; a path not mounted is fine."""
    if not is_mounted(path):
        return
    result = _libc.umount2(path.encode(), MNT_DETACH)
    if result != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
        _check(result, f"unmount {path}")
