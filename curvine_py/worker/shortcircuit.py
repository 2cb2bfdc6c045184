"""Short-circuit local reads: the data-plane protocol on a unix socket, where GET and READ_BLOCK are
answered with the open file descriptor of the stored file (SCM_RIGHTS) instead of its bytes.

The client on the same node reads [data_offset, data_offset + length) of that fd with `os.preadv`
into its own aligned buffer, straight from the page cache: no TCP, no copy in the worker. An fd
rather than a path needs no shared file permissions and keeps reading even if the object is
evicted meanwhile. The socket is created mode 0600 (the worker's user, i.e. root clients); the
token, when set, is still checked by HELLO as on TCP.
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat

from curvine_py.core.errors import InvalidArgument
from curvine_py.worker.limits import UNBOUNDED, ConnectionGate, ServerLimits
from curvine_py.worker.listener import LISTEN_BACKLOG, Listener
from curvine_py.worker.refuser import Refuser
from curvine_py.worker.server import session_handler
from curvine_py.worker.store import Store
from curvine_py.worker.workerstate import SessionOptions, WorkerState

log = logging.getLogger(__name__)

SOCKET_NAME = "worker.sock"
# sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107


def default_socket_path(first_data_dir: str) -> str:
    return os.path.join(os.path.abspath(first_data_dir), SOCKET_NAME)


class ShortCircuitServer:
    def __init__(self, store: Store, state: WorkerState, *, path: str, token: str, max_payload: int,
                 limits: ServerLimits | None = None, gate: ConnectionGate | None = None,
                 refuser: Refuser | None = None) -> None:
        self.path = os.path.abspath(path)
        if len(os.fsencode(self.path)) > MAX_SOCKET_PATH:
            raise InvalidArgument(f"unix socket path {self.path} is longer than {MAX_SOCKET_PATH} bytes; "
                                  "set a shorter one with --unix-socket")
        self._store = store
        self._state = state
        self._options = SessionOptions.bounded(token, max_payload, limits or UNBOUNDED, pass_fds=True)
        self._gate = gate
        self._refuser = refuser
        self._listener: Listener | None = None

    def start(self) -> str:
        self._remove_stale()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # The umask makes the socket 0600 from birth: a chmod after bind would leave a window
        # in which anyone could connect. Done before other threads create files.
        old = os.umask(0o177)
        try:
            sock.bind(self.path)
        except OSError:
            sock.close()
            raise
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        sock.listen(LISTEN_BACKLOG)
        self._listener = Listener(sock, session_handler(self._store, self._state, self._options),
                                  "shortcircuit", gate=self._gate,
                                  refuse=self._refuser.refuse if self._refuser else None)
        self._listener.start()
        log.info("short-circuit reads on %s", self.path)
        return self.path

    def _remove_stale(self) -> None:
        """A socket left by a killed worker (we hold the data dir lock, so it is not live)."""
        try:
            mode = os.lstat(self.path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise InvalidArgument(f"{self.path} exists and is not a socket")
        os.unlink(self.path)

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
