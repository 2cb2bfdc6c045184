"""The master's status page (observe/status.py) in a real headless Chromium, fed by a real cluster's
report (a master and 2 workers as processes): it shows the workers the cluster has, the epoch and the
directory policies, loads nothing from outside, refreshes itself, and a worker killed with SIGKILL
turns its row unhealthy once the master's lease expires (2 s with the harness's timers)."""
from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver import Chrome

from curvine_py.client.master import MasterClient
from curvine_py.core.domain import Policy, StorageClass
from curvine_py.observe.httpserve import HttpService
from curvine_py.observe.status import master_source, serve_status
from tests.harness import Cluster
from tests.web.browser import chromium

# Reads the page's state in one script run: the page reloads itself every second, so separate
# element lookups could straddle a reload.
READ_DOM = """
const rows = [...document.querySelectorAll('#workers tr.worker')].map(r => ({
  id: r.dataset.workerId, health: r.dataset.health,
  node: r.querySelector('td.node').textContent, capacity: r.querySelector('td.capacity').textContent,
  meter: r.querySelector('.bar').getAttribute('aria-valuenow')}));
const fields = {};
document.querySelectorAll('#summary [data-field]').forEach(d => { fields[d.dataset.field] = d.textContent; });
const policies = [...document.querySelectorAll('#policies tr[data-path]')].map(r => ({
  path: r.dataset.path, cls: r.querySelector('td.class').textContent}));
const quotas = [...document.querySelectorAll('#quotas tr[data-path]')].map(r => ({
  path: r.dataset.path, bytes: r.querySelector('td.bytes').textContent,
  inodes: r.querySelector('td.inodes').textContent}));
return {rows, fields, policies, quotas, loadedAt: performance.timeOrigin,
        resources: performance.getEntriesByType('resource').map(e => e.name),
        refresh: document.querySelector('meta[http-equiv=refresh]')?.content ?? null};
"""


def read_page(driver: Chrome) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        try:
            state: dict[str, Any] = driver.execute_script(READ_DOM)
            return state
        except WebDriverException:   # caught mid-reload: read again
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def wait_for_page(driver: Chrome, condition: Any, what: str, timeout: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    state = read_page(driver)
    while not condition(state):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; page shows {state}")
        time.sleep(0.2)
        state = read_page(driver)
    return state


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, workers=2, capacity="1GiB") as cluster:
        cluster.wait_for_live_workers(2)
        yield cluster


@pytest.fixture
def page(cluster: Cluster) -> Iterator[tuple[str, MasterClient]]:
    master = MasterClient(cluster.master_address)
    service: HttpService | None = serve_status("127.0.0.1", -1, master_source(master), refresh_s=1)
    assert service is not None
    try:
        yield f"http://127.0.0.1:{service.port}/", master
    finally:
        service.close()
        master.close()


@pytest.fixture
def browser() -> Iterator[Chrome]:
    with chromium() as driver:
        yield driver


def test_page_shows_the_cluster_and_a_killed_worker_turns_lost(
        cluster: Cluster, page: tuple[str, MasterClient], browser: Chrome) -> None:
    url, master = page
    client = cluster.client()
    client.fs.mkdir("/kvcache")
    client.fs.set_policy("/kvcache", Policy(storage_class=StorageClass.CACHE, ttl_ms=60_000))
    client.fs.mkdir("/tenant")
    client.fs.set_quota("/tenant", max_bytes=1 << 30, max_inodes=1000)
    client.fs.mkdir("/tenant/a")
    client.kv.put("status-page-object", b"x" * (1 << 20))
    report = master.report()

    browser.get(url)
    state = wait_for_page(browser, lambda s: len(s["rows"]) == 2 and s["policies"], "two workers")
    ids = {cluster.worker_id(0), cluster.worker_id(1)}
    assert {row["id"] for row in state["rows"]} == ids
    assert {row["node"] for row in state["rows"]} == {"node0", "node1"}
    assert all(row["health"] == "healthy" for row in state["rows"])
    assert all("1.0 GiB" in row["capacity"] for row in state["rows"])
    assert state["fields"]["workers"] == "2 / 2"
    assert int(state["fields"]["epoch"]) == report.epoch
    assert state["fields"]["hit-rate"] == "not reported"   # no lookups yet: no rate to show
    assert {(p["path"], p["cls"]) for p in state["policies"]} >= {("/kvcache", "cache")}
    assert state["policies"][0]["path"] == "/"
    assert state["quotas"] == [{"path": "/tenant", "bytes": "0 B / 1.0 GiB (0%)", "inodes": "1 / 1,000 (0%)"}]
    # Self-contained and self-refreshing: no fetched asset, a meta refresh of 1 s.
    assert state["resources"] == []
    assert state["refresh"] == "1"

    # The page reloads by itself: a later read comes from a newer document.
    first_load = state["loadedAt"]
    wait_for_page(browser, lambda s: s["loadedAt"] > first_load, "the page to refresh itself")

    cluster.kill_worker(1)
    dead, alive = cluster.worker_id(1), cluster.worker_id(0)
    state = wait_for_page(browser, lambda s: {r["id"]: r["health"] for r in s["rows"]}.get(dead) == "lost",
                          "the killed worker's row to turn lost")
    health = {row["id"]: row["health"] for row in state["rows"]}
    assert health == {dead: "lost", alive: "healthy"}
    assert state["fields"]["workers"] == "1 / 2"
    assert int(state["fields"]["epoch"]) > report.epoch
    # The unhealthy row is drawn as such (its class carries the red background).
    css = browser.execute_script(
        "return getComputedStyle(document.querySelector(`tr[data-worker-id='${arguments[0]}']`))"
        ".backgroundColor", dead)
    assert css == "rgb(253, 236, 234)"


def test_page_says_when_the_master_is_unreachable(tmp_path: pathlib.Path, browser: Chrome) -> None:
    with Cluster(tmp_path, workers=0) as cluster:
        master = MasterClient(cluster.master_address, timeout_s=1.0)
        service = serve_status("127.0.0.1", -1, master_source(master), refresh_s=1)
        assert service is not None
        try:
            browser.get(f"http://127.0.0.1:{service.port}/")
            wait_for_page(browser, lambda s: s["fields"].get("workers") == "0 / 0", "an empty cluster")
            cluster.kill_master()
            deadline = time.monotonic() + 20
            while True:
                text = browser.execute_script(
                    "const e = document.getElementById('error'); return e ? e.textContent : null")
                if text:
                    break
                assert time.monotonic() < deadline, "the page never said the master is unreachable"
                time.sleep(0.2)
            assert "cannot read the cluster report" in text
            assert read_page(browser)["rows"] == []    # no stale workers shown as current
        finally:
            service.close()
            master.close()
