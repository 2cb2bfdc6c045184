"""The status page's view model (observe/statusview.py), its HTML (observe/statuspage.py) and its
HTTP server (observe/status.py), without processes: health decisions with an injected clock, the
converter from a ClusterReport, escaping of user input, and what each bad request gets."""
from __future__ import annotations

import html.parser
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace

import pytest

from curvine_py.core.cluster import ClusterReport, WorkerInfo
from curvine_py.core.domain import Policy, PolicyAt, QuotaInfo, StorageClass
from curvine_py.observe import statusview as sv
from curvine_py.observe.status import StatusSource, serve_status
from curvine_py.observe.statuspage import human_bytes, render

NOW_MS = 1_800_000_000_000
GiB = 1 << 30


def worker(worker_id: str, node: str, *, live: bool = True, age_ms: int = 300, used: int = 0,
           capacity: int = 10 * GiB, evictions: int = 0) -> WorkerInfo:
    return WorkerInfo(worker_id=worker_id, node=node, host="10.0.0.1", port=9000, capacity=capacity,
                      used=used, available=capacity - used, live=live, evictions=evictions,
                      last_heartbeat_ms=NOW_MS - age_ms, objects=3, blocks=4)


def report(*workers: WorkerInfo) -> ClusterReport:
    return ClusterReport(cluster_id="c1", epoch=5, workers=workers,
                         capacity=sum(w.capacity for w in workers if w.live),
                         used=sum(w.used for w in workers if w.live), available=0, files=7, directories=2,
                         blocks=0)


def test_health_is_lost_then_late_then_full_then_healthy() -> None:
    assert sv.worker_health(False, 0, 100, 0) == "lost"
    assert sv.worker_health(False, 0, 100, 100) == "lost"      # lost wins over full
    assert sv.worker_health(True, sv.LATE_AFTER_MS + 1, 100, 0) == "late"
    assert sv.worker_health(True, None, 100, 0) == "late"      # never heard from
    assert sv.worker_health(True, 10, 100, 95) == "full"
    assert sv.worker_health(True, 10, 100, 94) == "healthy"
    assert sv.worker_health(True, 10, 0, 0) == "healthy"       # unknown capacity is not full


def test_view_from_a_report() -> None:
    view = sv.status_view(report(worker("w-b", "node-b", used=GiB, evictions=2),
                                 worker("w-a", "node-a", live=False, evictions=1),
                                 worker("w-c", "node-c", age_ms=60_000)),
                          now_ms=NOW_MS, master="127.0.0.1:8995")
    assert [w.worker_id for w in view.workers] == ["w-a", "w-c", "w-b"]   # what needs a look first
    assert [w.health for w in view.workers] == ["lost", "late", "healthy"]
    assert view.live_workers == 2
    assert view.evictions == 3
    assert view.workers[2].used_ratio == pytest.approx(0.1)
    assert view.workers[2].heartbeat_age_ms == 300
    assert view.workers[2].address == "10.0.0.1:9000"
    # Counts of 0 (no lookups yet): the rate is unknown, not 0%.
    assert view.hits == 0 and view.hit_rate is None
    assert view.workers[0].hit_rate is None


def test_hit_rate_when_counts_exist() -> None:
    w = sv.WorkerView("w", "n", "h:1", 0, 10, 1, 0, 0, 0, 5, "healthy", hits=3, misses=1)
    assert w.hit_rate == 0.75
    view = sv.StatusView("c", 1, (w, sv.WorkerView("x", "m", "h:2", 0, 10, 1, 0, 0, 0, 5, "healthy",
                                                   hits=0, misses=4)), 20, 2, 18, 0, 0, 0, 0)
    assert view.hits == 3 and view.misses == 5 and view.hit_rate == 3 / 8
    assert sv.hit_rate(0, 0) is None


def test_quotas_from_the_report() -> None:
    r = replace(report(worker("w1", "n1")), quotas=(
        QuotaInfo(ino=5, path="/tenant-b", max_bytes=GiB, used_bytes=GiB // 4, max_inodes=0, used_inodes=12),
        QuotaInfo(ino=6, path="/tenant-a", max_bytes=0, max_inodes=100, used_bytes=5, used_inodes=99)))
    view = sv.status_view(r, now_ms=NOW_MS)
    assert [q.path for q in view.quotas] == ["/tenant-a", "/tenant-b"]
    page = render(view)
    rows = [attrs for tag, attrs in parse(page).tags if tag == "tr" and "data-path" in attrs]
    assert [a["data-path"] for a in rows] == ["/tenant-a", "/tenant-b"]
    assert "256.0 MiB / 1.0 GiB (25%)" in page
    assert "99 / 100 (99%)" in page
    assert "12 <span class=\"none\">/ unlimited</span>" in page
    empty = render(sv.status_view(report(worker("w1", "n1")), now_ms=NOW_MS))
    assert "no directory has a quota" in empty


def test_policy_view() -> None:
    p = sv.policy_view(PolicyAt(Policy(storage_class=StorageClass.CACHE, ttl_ms=5000), "/kv"))
    assert (p.path, p.storage_class, p.ttl_ms, p.placement, p.replicas) == ("/kv", "cache", 5000, "hash", 0)
    root = sv.policy_view(PolicyAt(Policy(storage_class=StorageClass.DURABLE, placement="local"), ""))
    assert (root.path, root.storage_class, root.placement) == ("/", "durable", "local")


class _Page(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    return parser


def test_page_escapes_user_input_and_loads_nothing() -> None:
    hostile = '<script>alert(1)</script>"'
    view = sv.status_view(report(worker("w1", hostile)), now_ms=NOW_MS,
                          policies=[PolicyAt(Policy(storage_class=StorageClass.CACHE), "/a<b>")])
    page = parse(render(view, refresh_s=3))
    assert not any(tag == "script" for tag, _ in page.tags)
    assert not any(tag in ("img", "iframe") or "src" in attrs for tag, attrs in page.tags)
    assert all(attrs.get("href", "").startswith("data:") for tag, attrs in page.tags  # type: ignore[union-attr]
               if tag == "link")
    assert hostile in "".join(page.text)           # shown as text, not markup
    assert ("meta", {"http-equiv": "refresh", "content": "3"}) in page.tags
    rows = [attrs for tag, attrs in page.tags if tag == "tr" and "data-worker-id" in attrs]
    assert rows == [{"class": "worker health-healthy", "data-worker-id": "w1", "data-health": "healthy"}]
    assert any(attrs.get("data-path") == "/a<b>" for _, attrs in page.tags)


def test_page_of_an_unreachable_master_shows_the_error_only() -> None:
    page = render(sv.unavailable_view("m:1", "UNAVAILABLE: connection refused"))
    parsed = parse(page)
    assert any(attrs.get("id") == "error" for _, attrs in parsed.tags)
    assert "connection refused" in page
    assert not any(attrs.get("id") == "workers" for _, attrs in parsed.tags)


def test_human_bytes() -> None:
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(10 * GiB) == "10.0 GiB"
    assert human_bytes(5 << 50) == "5120.0 TiB"


# -- the HTTP server --------------------------------------------------------------------------------

@pytest.fixture
def served() -> Iterator[tuple[str, list[StatusSource]]]:
    """A server whose source the test can swap (sources[0])."""
    good = sv.status_view(report(worker("w1", "n1")), now_ms=NOW_MS)
    sources: list[StatusSource] = [lambda: good]
    service = serve_status("127.0.0.1", -1, lambda: sources[0]())
    assert service is not None
    try:
        yield f"http://127.0.0.1:{service.port}", sources
    finally:
        service.close()


def fetch(url: str, method: str = "GET") -> tuple[int, str, str]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_server_paths(served: tuple[str, list[StatusSource]]) -> None:
    base, _ = served
    status, kind, body = fetch(base + "/")
    assert (status, kind) == (200, "text/html; charset=utf-8") and 'data-worker-id="w1"' in body
    assert fetch(base + "/index.html?x=1")[0] == 200
    assert fetch(base + "/healthz")[::2] == (200, "ok\n")
    assert fetch(base + "/", "HEAD")[::2] == (200, "")
    assert fetch(base + "/metrics")[0] == 404        # the exporter has its own port
    assert fetch(base + "/../etc/passwd")[0] == 404
    assert fetch(base + "/", "POST")[0] == 501        # read-only: no other method is served


def test_server_answers_503_when_the_source_fails(served: tuple[str, list[StatusSource]]) -> None:
    base, sources = served
    sources[0] = lambda: sv.unavailable_view("m:1", "DEADLINE_EXCEEDED")
    status, _, body = fetch(base + "/")
    assert status == 503 and "DEADLINE_EXCEEDED" in body

    def broken() -> sv.StatusView:
        raise KeyError("bug")

    sources[0] = broken
    status, _, body = fetch(base + "/")
    assert status == 503 and "internal error" in body
    assert fetch(base + "/healthz")[0] == 200          # the server itself is fine


def test_server_options_are_checked() -> None:
    assert serve_status("127.0.0.1", 0, lambda: sv.unavailable_view("", "")) is None
    with pytest.raises(ValueError, match="refresh_s"):
        serve_status("127.0.0.1", -1, lambda: sv.unavailable_view("", ""), refresh_s=0)
