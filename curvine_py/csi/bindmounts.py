"""mount(2)/umount2(2) for the node plugin's bind mounts (no `mount` binary needed in the image),
and statfs of a volume path that tells a dead FUSE mount apart."""
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
MNT_DETACH = 2

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


def detach(path: str) -> None:
    """Lazy unmount (MNT_DETACH): works for dead FUSE mounts too; a path not mounted is fine."""
    if not is_mounted(path):
        return
    result = _libc.umount2(path.encode(), MNT_DETACH)
    if result != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
        _check(result, f"unmount {path}")


def is_read_only(path: str) -> bool:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
