"""The one exception hierarchy of curvine-py and its errno identity.

Every error that crosses a boundary is a `CurvineError` carrying a Linux errno. Each boundary maps
it with one table: gRPC status (rpc/errors.py), data-plane frames (errno field), FUSE
(`FUSEError(errno)`), CSI status. Subclasses exist for the errors callers branch on.
"""
from __future__ import annotations

import errno as _errno
import os


class CurvineError(Exception):
    """Base class. `errno` is the POSIX meaning; `message` is for humans."""

    errno: int = _errno.EIO

    def __init__(self, message: str = "", *, errno: int | None = None) -> None:
        if errno is not None:
            self.errno = errno
        super().__init__(message or os.strerror(self.errno))

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class NotFound(CurvineError):
    errno = _errno.ENOENT


class AlreadyExists(CurvineError):
    errno = _errno.EEXIST


class NotADirectory(CurvineError):
    errno = _errno.ENOTDIR


class IsADirectory(CurvineError):
    errno = _errno.EISDIR


class DirectoryNotEmpty(CurvineError):
    errno = _errno.ENOTEMPTY


class PermissionDenied(CurvineError):
    errno = _errno.EACCES


class NotPermitted(CurvineError):
    errno = _errno.EPERM


class InvalidArgument(CurvineError):
    errno = _errno.EINVAL


class NameTooLong(CurvineError):
    errno = _errno.ENAMETOOLONG


class NoSpace(CurvineError):
    errno = _errno.ENOSPC


class TooLarge(CurvineError):
    """A payload or request beyond the configured maximum (refused before it is read)."""

    errno = _errno.EFBIG


class NoData(CurvineError):
    """Missing xattr."""

    errno = _errno.ENODATA


class Unavailable(CurvineError):
    """A peer (master or worker) cannot be reached or died mid-request."""

    errno = _errno.EHOSTUNREACH


class NotLeader(Unavailable):
    """Another master holds the leadership of this metadata database (PostgreSQL's advisory lock,
    master/store/pgengine.py). `leader` is the address it advertises, '' when not known yet."""

    def __init__(self, leader: str = "", message: str = "") -> None:
        self.leader = leader
        super().__init__(message or (f"another master leads this metadata database (at {leader})" if leader
                                     else "another master leads this metadata database"))


class Busy(Unavailable):
    """A server refused for now (connection limit, out of file descriptors): try another replica
    or miss, as for a peer that cannot be reached."""

    errno = _errno.EAGAIN


class Timeout(CurvineError):
    errno = _errno.ETIMEDOUT


class Corrupt(CurvineError):
    """Stored bytes failed their checksum: never returned to the caller."""

    errno = _errno.EIO


class Unauthenticated(CurvineError):
    errno = _errno.EACCES


class StaleEpoch(CurvineError):
    """The client's membership view is older than the worker's: refresh and retry."""

    errno = _errno.ESTALE


class ProtocolError(CurvineError):
    """The peer sent bytes that are not a valid frame (peer's fault, connection is dropped)."""

    errno = _errno.EPROTO


class LocalProtocolError(CurvineError):
    """This process misused the codec (our bug, not the peer's)."""

    errno = _errno.EPROTO


class NotSupported(CurvineError):
    errno = _errno.EOPNOTSUPP


class QuotaExceeded(CurvineError):
    """A directory quota (bytes or inodes, master/store/quotas.py) would be exceeded."""

    errno = _errno.EDQUOT


_BY_ERRNO: dict[int, type[CurvineError]] = {
    cls.errno: cls
    for cls in (NotFound, AlreadyExists, NotADirectory, IsADirectory, DirectoryNotEmpty,
                PermissionDenied, NotPermitted, InvalidArgument, NameTooLong, NoSpace, TooLarge,
                NoData, Unavailable, Timeout, StaleEpoch, ProtocolError, NotSupported, QuotaExceeded)
}


_BY_ERRNO[Busy.errno] = Busy
# Other error replies that mean "this server cannot take the request now" (a worker that answers
# the OSError of an open or accept), not "the request is wrong": Busy too, with their own errno.
BUSY_ERRNOS = frozenset({_errno.EAGAIN, _errno.EMFILE, _errno.ENFILE, _errno.ENOBUFS, _errno.ENOMEM})


def from_errno(code: int, message: str = "") -> CurvineError:
    """Rebuilds the most specific error class for an errno received over the wire."""
    cls = Busy if code in BUSY_ERRNOS else _BY_ERRNO.get(code, CurvineError)
    return cls(message, errno=code)


def errno_name(code: int) -> str:
    return _errno.errorcode.get(code, str(code))


def errno_from_name(name: str) -> int:
    value = getattr(_errno, name, None)
    if isinstance(value, int):
        return value
    return int(name) if name.isdigit() else _errno.EIO
