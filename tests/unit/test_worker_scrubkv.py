"""SCRUB_KV pages on a real store: the walk covers every KV object once across pages (blocks are not
its business), a page stops at its byte budget and resumes at its cursor, corrupt objects are named
by key and dropped, the rate is held (fake clock), and the op answers the same over the wire."""
from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest

from curvine_py.core import frames
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.worker.scrubkv import scrub_page, unreadable
from curvine_py.worker.server import DataServer, WorkerState
from curvine_py.worker.store import Store
from tests.unit.test_worker_scrub import MiB, flip_bit, object_path
from tests.unit.test_worker_server import WireClient


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Store]:
    now = [1_000_000]
    with Store([(str(tmp_path / "d"), 0)], clock=lambda: now[0]) as s:
        yield s


def test_pages_cover_every_object_once_and_drop_the_corrupt_ones(store: Store) -> None:
    keys = [f"k{n}" for n in range(8)]
    for key in keys:
        store.put_object(key, os.urandom(2 * MiB))
    store.write_block(7, os.urandom(MiB))
    for key in ("k1", "k6"):
        flip_bit(object_path(store, key), MiB)
    seen, corrupt, after, pages = 0, list[str](), "", 0
    while True:
        page = scrub_page(store, after, budget=5 * MiB, rate=0)
        pages += 1
        assert page.bytes <= 5 * MiB + 2 * MiB, "a page stops at the first object past its budget"
        seen += page.objects
        corrupt += page.corrupt
        if page.done:
            break
        assert page.next_after > after
        after = page.next_after
    assert seen == 8 and pages >= 3                   # at most 3 objects (6 MiB) a page
    assert sorted(corrupt) == ["k1", "k6"]
    assert store.open_object("k1") is None and store.open_object("k6") is None
    assert store.open_object("k0") is not None and store.contains_block(7)
    again = scrub_page(store, "", budget=0, rate=0)
    assert again.done and again.objects == 6 and again.corrupt == ()


def test_an_object_with_an_unreadable_header_is_named_by_its_file(store: Store) -> None:
    store.put_object("k", os.urandom(MiB))
    path = object_path(store, "k")
    with open(path, "r+b") as fh:
        fh.write(b"\xff" * 64)                         # the header's fixed part, key included
    page = scrub_page(store, "", budget=0, rate=0)
    assert page.done and page.objects == 1
    assert page.corrupt == (unreadable(f"kv/{os.path.basename(path)}"),)
    assert not os.path.exists(path)


def test_the_rate_is_held(store: Store) -> None:
    for n in range(3):
        store.put_object(f"k{n}", os.urandom(MiB))
    now, slept = [0.0], list[float]()

    def sleep(seconds: float) -> bool:
        slept.append(seconds)
        now[0] += seconds
        return False
    page = scrub_page(store, "", budget=0, rate=MiB, clock=lambda: now[0], sleep=sleep)
    assert page.done and page.objects == 3
    assert now[0] == pytest.approx(3.0), "3 MiB at 1 MiB/s"


def test_the_op_over_the_wire(store: Store) -> None:
    store.put_object("good", os.urandom(MiB))
    store.put_object("bad", os.urandom(MiB))
    flip_bit(object_path(store, "bad"), MiB // 2)
    server = DataServer(store, WorkerState("w1"), host="127.0.0.1", port=0, token="", max_payload=8 * MiB)
    address = server.start()
    try:
        with WireClient(address) as c:
            reply = c.call(frames.Op.SCRUB_KV, DataHeader(key="", length=0, offset=0))
    finally:
        server.stop()
    assert reply.errno == 0 and reply.found and reply.hit_count == 2 and list(reply.keys) == ["bad"]
    assert reply.length == MiB, "verified bytes: the good object; the bad one fails its only chunk"
    assert store.open_object("bad") is None
