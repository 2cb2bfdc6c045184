"""Helpers of the POSIX tests through the mount: libc calls Python's os module lacks."""
from __future__ import annotations

import ctypes
import os
import pathlib

MiB = 1 << 20
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2


def renameat2(src: pathlib.Path, dst: pathlib.Path, flags: int) -> None:
    result = libc.renameat2(AT_FDCWD, bytes(src), AT_FDCWD, bytes(dst), flags)
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def raw_fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, mode, offset, length) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def errno_of(fn: object, *args: object) -> int:
    try:
        fn(*args)  # type: ignore[operator]
    except OSError as exc:
        return exc.errno or 0
    return 0
