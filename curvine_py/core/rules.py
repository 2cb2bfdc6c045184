"""Pure rules about stored blocks, written once for every role that needs them.

- `verifiable_range`: which byte range of a stored block to request so that every byte that arrives
  can be checked against its chunk digest, and how many bytes must arrive (client files, the FUSE
  data plane).
- `truncate_map`: which blocks of a file survive a truncate to a size, and which one is shortened
  (the master applies it to its tables, a client to the block map it holds).

No I/O and no generated code here: plain integers in, frozen values out.
"""
from __future__ import annotations

from dataclasses import dataclass

from curvine_py.core.errors import InvalidArgument
from curvine_py.core.layout import CHUNK_SIZE


@dataclass(frozen=True, slots=True)
class ReadRange:
    """The READ_BLOCK request for the wanted bytes [inner, inner + stored) of a block.

    `offset`/`length`: the range to request (starts on a chunk boundary); `minimum`: how many bytes
    must arrive for the wanted ones to be complete (the worker may clip a request at its stored
    end); `skip`: where the wanted bytes start in what arrives; `stored`: how many of the wanted
    bytes the block holds (the rest of the wanted range lies past its end and reads as zeros)."""
    offset: int
    length: int
    minimum: int
    skip: int
    stored: int

    @property
    def direct(self) -> bool:
        """True when exactly the stored wanted bytes are requested: they can be received straight
        into the caller's buffer, no staging copy."""
        return self.skip == 0 and self.length == self.stored


def verifiable_range(block_length: int, has_checksum: bool, inner: int, length: int,
                     chunk: int = CHUNK_SIZE) -> ReadRange:
    """The chunk-aligned request that yields bytes [inner, inner + length) of a stored block
    verifiably (bytes past `block_length` are not requested: they read as zeros).

    Why whole chunks: every chunk of a stored file has its own digest, so a range must start on a
    chunk boundary and end on one, or at the stored end. The block's recorded `block_length` is the
    stored end only while the block has its checksum: a truncate shortens the recorded length and
    clears the checksum (0) but leaves the stored file as it was, so then the request runs to the
    next chunk boundary and the worker clips it at its real stored end."""
    if block_length < 0 or inner < 0 or length < 0 or chunk <= 0:
        raise InvalidArgument(f"bad read range: block length {block_length}, offset {inner}, "
                              f"length {length}, chunk {chunk}")
    stored = min(length, max(0, block_length - inner))
    if stored == 0:
        return ReadRange(offset=inner, length=0, minimum=0, skip=0, stored=0)
    start = inner - inner % chunk
    want_end = inner + stored
    exact = want_end % chunk == 0 or (has_checksum and want_end == block_length)
    end = want_end if exact else -(-want_end // chunk) * chunk
    return ReadRange(offset=start, length=end - start, minimum=want_end - start, skip=inner - start,
                     stored=stored)


@dataclass(frozen=True, slots=True)
class TruncateMap:
    """What a truncate to `size` does to a file's blocks of `block_size` bytes: every block whose
    index is `first_dropped` or more is dropped; block `tail_index` (when `tail_length` > 0) keeps
    at most `tail_length` bytes and, if it had more, loses its checksum (it no longer covers the
    stored file). Nothing is ever allocated: an extension is a hole."""
    size: int
    block_size: int
    first_dropped: int
    tail_index: int
    tail_length: int

    def length_after(self, index: int, length: int) -> int | None:
        """The length block `index` (of `length` bytes) has after the truncate; None if dropped."""
        if index >= self.first_dropped:
            return None
        if index == self.tail_index and self.tail_length and length > self.tail_length:
            return self.tail_length
        return length


def truncate_map(size: int, block_size: int) -> TruncateMap:
    if size < 0 or block_size <= 0:
        raise InvalidArgument(f"bad truncate: size {size}, block size {block_size}")
    tail_index, tail_length = divmod(size, block_size)
    return TruncateMap(size=size, block_size=block_size, first_dropped=-(-size // block_size),
                       tail_index=tail_index, tail_length=tail_length)
