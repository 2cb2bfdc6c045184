"""The one exception hierarchy of curvine-py and its errno identity.

Every error that crosses a boundary is a `CurvineError` carrying a Linux errno. Each boundary maps
it with one table: gRPC status (`STATUS_BY_ERRNO` here, turned into codes by rpc/errors.py and
csi/errors.py), data-plane frames (errno field), FUSE (`FUSEError(errno)`). Subclasses exist for
the errors callers branch on.
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
# Other ways a peer cannot be reached (nothing listens, the connection dropped): Unavailable too,
# so a caller that fails over on Unavailable also does on these, and the errno says which.
UNAVAILABLE_ERRNOS = frozenset({_errno.EHOSTUNREACH, _errno.ECONNREFUSED, _errno.ECONNRESET,
                                _errno.ENOTCONN, _errno.ENETUNREACH})
# Other error replies that mean "this server cannot take the request now" (a worker that answers
# the OSError of an open or accept), not "the request is wrong": Busy too, with their own errno.
BUSY_ERRNOS = frozenset({_errno.EAGAIN, _errno.EMFILE, _errno.ENFILE, _errno.ENOBUFS, _errno.ENOMEM})


def from_errno(code: int, message: str = "") -> CurvineError:
    """Rebuilds the most specific error class for an errno received over the wire."""
    if code in BUSY_ERRNOS:
        return Busy(message, errno=code)
    if code in UNAVAILABLE_ERRNOS:
        return Unavailable(message, errno=code)
    return _BY_ERRNO.get(code, CurvineError)(message, errno=code)


# errno -> gRPC status *name* (grpc.StatusCode[name]), the one table of the master's and the CSI
# driver's replies; core/ names the codes so it need not import grpc.
STATUS_BY_ERRNO: dict[int, str] = {
    _errno.ENOENT: "NOT_FOUND",
    _errno.ENODATA: "NOT_FOUND",                # missing xattr
    _errno.EEXIST: "ALREADY_EXISTS",
    _errno.ENOTEMPTY: "FAILED_PRECONDITION",
    _errno.ENOTDIR: "FAILED_PRECONDITION",
    _errno.EISDIR: "FAILED_PRECONDITION",
    _errno.ESTALE: "FAILED_PRECONDITION",       # stale membership epoch: refresh, then retry
    _errno.ELOOP: "FAILED_PRECONDITION",        # too many symlinks in a path
    _errno.EBUSY: "FAILED_PRECONDITION",        # in use (CSI DeleteVolume: "Volume in use")
    _errno.EACCES: "PERMISSION_DENIED",
    _errno.EPERM: "PERMISSION_DENIED",
    _errno.EINVAL: "INVALID_ARGUMENT",
    _errno.E2BIG: "INVALID_ARGUMENT",           # xattr value too large
    _errno.ENAMETOOLONG: "INVALID_ARGUMENT",
    _errno.ERANGE: "OUT_OF_RANGE",              # xattr name too long
    _errno.EFBIG: "OUT_OF_RANGE",
    _errno.ENOSPC: "RESOURCE_EXHAUSTED",
    _errno.EDQUOT: "RESOURCE_EXHAUSTED",        # a directory quota
    _errno.EHOSTUNREACH: "UNAVAILABLE",
    _errno.ECONNREFUSED: "UNAVAILABLE",
    _errno.ENOTCONN: "UNAVAILABLE",
    _errno.ETIMEDOUT: "DEADLINE_EXCEEDED",
    _errno.EOPNOTSUPP: "UNIMPLEMENTED",
    _errno.EIO: "INTERNAL",                     # also every non-Curvine exception (a bug)
}
# The one fallback: an errno the table does not know is an error space the caller cannot act on,
# gRPC's UNKNOWN (the errno itself still travels in the master's trailing metadata).
FALLBACK_STATUS = "UNKNOWN"


def status_name(code: int) -> str:
    """The gRPC status name a CurvineError with this errno is answered with."""
    return STATUS_BY_ERRNO.get(code, FALLBACK_STATUS)


def errno_name(code: int) -> str:
    return _errno.errorcode.get(code, str(code))


def errno_from_name(name: str) -> int:
    value = getattr(_errno, name, None)
    if isinstance(value, int):
        return value
    return int(name) if name.isdigit() else _errno.EIO
