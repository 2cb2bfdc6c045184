"""The benchmarks' raw pair (bench/rawpair.py) in its two congestion modes: "reno" sets Reno on
both ends of a loopback connection (as the client and the worker do), "host" touches neither."""
from __future__ import annotations

import mmap
import os
import pathlib

import pytest

from bench.rawpair import RawClient, raw_server, set_congestion

from .test_transport_local import accepted, congestion_control, host_default


@pytest.mark.parametrize(("mode", "expected"), [("reno", b"reno"), ("host", None)])
def test_modes_on_a_loopback_connection(mode: str, expected: bytes | None) -> None:
    with accepted("127.0.0.1") as (client, server):
        set_congestion(client, mode)
        set_congestion(server, mode)
        want = expected or host_default()
        assert congestion_control(client) == want
        assert congestion_control(server) == want


def test_unknown_mode_is_refused(tmp_path: pathlib.Path) -> None:
    with accepted("127.0.0.1") as (client, _server), pytest.raises(ValueError):
        set_congestion(client, "bbr")
    with pytest.raises(ValueError), raw_server("127.0.0.1", tmp_path, congestion="cubic"):
        pass


@pytest.mark.parametrize("mode", ["reno", "host"])
def test_pair_moves_bytes_in_each_mode(tmp_path: pathlib.Path, mode: str) -> None:
    size = 3 << 20
    with raw_server("127.0.0.1", tmp_path, congestion=mode) as (host, port, _pid):
        client = RawClient(host, port, congestion=mode)
        try:
            want = b"reno" if mode == "reno" else host_default()
            assert congestion_control(client._sock) == want
            out = memoryview(mmap.mmap(-1, size))
            client.get(out)
            assert bytes(out) == (tmp_path / f"raw-{size}").read_bytes()
            client.put(memoryview(os.urandom(size)))
        finally:
            client.close()


def test_default_mode_is_reno_for_existing_callers(tmp_path: pathlib.Path) -> None:
    with raw_server("127.0.0.1", tmp_path) as (host, port, _pid):
        client = RawClient(host, port)
        try:
            assert congestion_control(client._sock) == b"reno"
        finally:
            client.close()


def test_connections_are_served_at_once(tmp_path: pathlib.Path) -> None:
    """A batch striped over several connections (the batch ceiling of bench lmcache_same_tcp) is
    served in parallel: the second connection is answered while the first stays open."""
    size = 1 << 20
    with raw_server("127.0.0.1", tmp_path) as (host, port, _pid):
        first, second = RawClient(host, port), RawClient(host, port)
        try:
            first.get(memoryview(mmap.mmap(-1, size)))
            second._sock.settimeout(10)   # a server taking one connection at a time never answers
            out = memoryview(mmap.mmap(-1, size))
            second.get(out)
            assert bytes(out) == (tmp_path / f"raw-{size}").read_bytes()
        finally:
            first.close()
            second.close()
