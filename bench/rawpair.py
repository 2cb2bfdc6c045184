"""The baseline every data-path benchmark is measured against, in the same run: the best raw
Python socket pair (ARCHITECTURE.md). A separate server process answers G(et) with `os.sendfile`
from a file in the page cache and P(ut) with `recv_into` a page-aligned mmap (+ a 1-byte ack);
the client receives into page-aligned buffers.

Congestion control, two modes (`congestion=`), the same on both ends of a connection:
    "reno" (default)  on a loopback connection both the server and the client socket use Reno, as
                      the worker (accepted side) and the client library (connecting side) do
                      (transport/blocking.py set_local_options: a host default of BBR paces every
                      send, which costs loopback more than half its throughput);
    "host"            neither end touches TCP_CONGESTION: what two plain processes get from the
                      host's default (BBR on the bench machine).
Connections that do not come from loopback keep the host's default in both modes.

A verifying receiver (`RawClient.get(out, verify=True)`) hashes each 1 MiB of a get with xxh3-64 as
it lands, as our client verifies every chunk: the baseline of the issue's "gap that verification
leaves" (14-32 MiB gets). It only computes the digests (nothing to compare them with: the raw server
stores none), which is the work a verifying receiver adds.

Run as a script (also inside a network namespace): `python bench/rawpair.py HOST WORKDIR [reno|host]`
prints its port, then serves until killed (a Q(uit) request ends its connection).
"""
from __future__ import annotations

import contextlib
import ipaddress
import mmap
import os
import pathlib
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence

import xxhash

REQUEST = struct.Struct("<cQ")  # op (b"G" | b"P" | b"Q"), size
CHUNK = 1 << 20   # what a verifying receiver hashes at a time (our chunk digests: core/layout.py)
CONGESTION_MODES = ("reno", "host")


def set_congestion(sock: socket.socket, congestion: str) -> None:
    """Reno on a loopback connection in "reno" mode (what set_local_options does in the product:
    kept standalone so that the baseline needs nothing from curvine_py); "host" leaves it alone."""
    if congestion not in CONGESTION_MODES:
        raise ValueError(f"congestion mode {congestion!r}: one of {CONGESTION_MODES}")
    if congestion == "reno" and ipaddress.ip_address(sock.getpeername()[0]).is_loopback:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"reno")


def recv_exactly_into(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:], len(view) - got)
        if n == 0:
            raise EOFError("peer went away")
        got += n


def serve(host: str, workdir: str, congestion: str = "reno") -> None:
    """Every connection on a thread of its own (a batch striped over several connections is served
    at once, as the worker serves it); the payload files and buffers are made once per size."""
    listener = socket.create_server((host, 0))
    print(listener.getsockname()[1], flush=True)
    files: dict[int, int] = {}
    buffers: dict[int, memoryview] = {}
    made = threading.Lock()

    def payload_fd(size: int) -> int:
        with made:
            fd = files.get(size)
            if fd is None:
                path = os.path.join(workdir, f"raw-{size}")
                with open(path, "wb") as fh:
                    fh.write(os.urandom(size))
                fd = files[size] = os.open(path, os.O_RDONLY)
            return fd

    def receive_buffer(size: int) -> memoryview:
        with made:
            buf = buffers.get(size)
            if buf is None:
                buf = buffers[size] = memoryview(mmap.mmap(-1, size))
            return buf

    def one(conn: socket.socket) -> None:
        head = memoryview(bytearray(REQUEST.size))
        try:
            while True:
                recv_exactly_into(conn, head)
                op, size = REQUEST.unpack(head)
                if op == b"G":
                    fd, sent = payload_fd(size), 0
                    while sent < size:
                        sent += os.sendfile(conn.fileno(), fd, sent, size - sent)
                elif op == b"P":
                    recv_exactly_into(conn, receive_buffer(size))
                    conn.sendall(b"K")
                else:
                    return
        except (EOFError, ConnectionError):
            pass
        finally:
            conn.close()

    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        set_congestion(conn, congestion)
        threading.Thread(target=one, args=(conn,), daemon=True).start()


@contextlib.contextmanager
def raw_server(host: str, workdir: pathlib.Path, prefix: Sequence[str] = (), *,
               congestion: str = "reno") -> Iterator[tuple[str, int, int]]:
    """The server process (in a namespace with `prefix`, e.g. `ip netns exec NS`): (host, port, pid).
    `ip netns exec` execs its command, so the pid is the server's."""
    if congestion not in CONGESTION_MODES:
        raise ValueError(f"congestion mode {congestion!r}: one of {CONGESTION_MODES}")
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([*prefix, sys.executable, __file__, host, str(workdir), congestion],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        yield host, int(proc.stdout.readline()), proc.pid
    finally:
        proc.kill()
        proc.wait()


class RawClient:
    """The raw pair's client; `congestion` as for the server (use the same mode on both ends)."""

    def __init__(self, host: str, port: int, *, congestion: str = "reno") -> None:
        self._sock = socket.create_connection((host, port))
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        set_congestion(self._sock, congestion)

    def get(self, out: memoryview, verify: bool = False) -> None:
        """`len(out)` bytes into `out`; with `verify`, each 1 MiB is hashed right after it lands
        (while still in cache), as a verifying client does."""
        self._sock.sendall(REQUEST.pack(b"G", len(out)))
        if not verify:
            recv_exactly_into(self._sock, out)
            return
        for start in range(0, len(out), CHUNK):
            piece = out[start:start + CHUNK]
            recv_exactly_into(self._sock, piece)
            xxhash.xxh3_64_intdigest(piece)

    def put(self, data: memoryview) -> None:
        self._sock.sendall(REQUEST.pack(b"P", len(data)))
        self._sock.sendall(data)
        if self._sock.recv(1) != b"K":
            raise EOFError("raw server went away")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.sendall(REQUEST.pack(b"Q", 0))
            self._sock.close()


def process_cpu(pid: int) -> float:
    """CPU seconds the live threads of a process have run so far (schedstat, nanoseconds: the
    10 ms ticks of /proc/PID/stat are too coarse for a 200 ms sample)."""
    total = 0
    try:
        tasks = list(pathlib.Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # the thread ended meanwhile
    return total / 1e9


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], *sys.argv[3:4])
