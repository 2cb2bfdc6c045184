"""Buffers: page-aligned receive buffers we allocate, and views of the buffers callers hand us.

Kernel-to-user copies into unaligned memory are 5-6x slower on this CPU class (ARCHITECTURE.md,
"Performance notes"): every payload we allocate ourselves is an anonymous mmap, which is aligned.

A caller's buffer must be received into in place. Slicing a bytearray or an mmap copies, so code
below the API boundary only ever sees a flat byte memoryview of it (`writable_view`): bytes then land
in the caller's memory, and the bytes verified are exactly the bytes returned.
"""
from __future__ import annotations

import ctypes
import mmap
from typing import Any

from curvine_py.core.errors import InvalidArgument


def aligned(size: int) -> memoryview:
    """A writable, page-aligned buffer of `size` bytes (zero-filled by the kernel)."""
    if size == 0:
        return memoryview(bytearray())
    return memoryview(mmap.mmap(-1, size))


def zero(view: memoryview) -> None:
    """Fills a writable byte view with zeros in place (holes, bytes past a block's end, recycled
    buffers): a memset, no temporary of the view's size."""
    if len(view):
        ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(view)), 0, len(view))


def writable_view(buffer: Any) -> memoryview:
    """A flat, writable byte view of any writable buffer: bytearray, mmap, memoryview, array,
    numpy arrays, and CPU torch tensors (which do not export the buffer protocol). Raises
    InvalidArgument for read-only, non-contiguous or device memory: a caller's mistake, never
    something to report as corruption."""
    try:
        view = memoryview(buffer)
    except TypeError:
        return _tensor_view(buffer)
    if view.readonly:
        raise InvalidArgument(f"buffer of type {type(buffer).__name__} is read-only")
    if not view.c_contiguous:
        raise InvalidArgument(f"buffer of type {type(buffer).__name__} is not contiguous")
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _tensor_view(tensor: Any) -> memoryview:
    """The bytes of a torch tensor, without importing torch (duck-typed on its methods). The view
    does not keep the tensor alive: callers hold it for the duration of the call, as with any
    buffer handed to a receive."""
    required = ("data_ptr", "is_contiguous", "numel", "element_size", "device")
    if not all(hasattr(tensor, name) for name in required):
        raise InvalidArgument(f"{type(tensor).__name__} is not a writable buffer")
    if tensor.device.type != "cpu":
        raise InvalidArgument(f"tensor on {tensor.device} is not host memory")
    if not tensor.is_contiguous():
        raise InvalidArgument("tensor is not contiguous")
    size = int(tensor.numel()) * int(tensor.element_size())
    if size == 0:
        return memoryview(bytearray())
    return memoryview((ctypes.c_char * size).from_address(int(tensor.data_ptr()))).cast("B")
