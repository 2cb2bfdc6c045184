"""Page-aligned receive buffers.

Kernel-to-user copies into unaligned memory are 5-6x slower on this CPU class (ARCHITECTURE.md,
"Performance notes"): every payload we allocate ourselves is an anonymous mmap, which is aligned.
"""
from __future__ import annotations

import mmap


def aligned(size: int) -> memoryview:
    """A writable, page-aligned buffer of `size` bytes (zero-filled by the kernel)."""
    if size == 0:
        return memoryview(bytearray())
    return memoryview(mmap.mmap(-1, size))
