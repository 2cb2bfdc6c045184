"""The master's status page as an operator needs it (issue 27), in a real headless Chromium at
1200 px: a cluster of three workers with long node names and a real mount, where a killed worker
leaves a lost block (a file of one replica) and a repaired one (a file of two). The page shows the
lost and under-replicated counts, the repair's progress, the file that lost data, the mount and
a working link to the master's /metrics, and no table is wider than the window (measured in the
DOM and on the screenshot)."""
from __future__ import annotations

import io
import pathlib
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families
from selenium.common.exceptions import WebDriverException
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By

from curvine_py.core.domain import Policy
from curvine_py.procs import RoleProcess, curvine_command, start
from tests.harness import Cluster, random_bytes, wait_until
from tests.web.browser import chromium

WIDTH = 1200
NODES = [f"gpu-inference-node-{i:04d}.rack-17.dc-west.example.internal" for i in range(3)]

READ = """
const fields = {};
document.querySelectorAll('#summary [data-field], #replication [data-field]').forEach(
  d => { fields[(d.closest('#replication') ? 'r:' : '') + d.dataset.field] = d.textContent; });
const boxes = [...document.querySelectorAll('div.table')].map(d => ({
  id: d.querySelector('table').id, scroll: d.scrollWidth, client: d.clientWidth,
  right: d.querySelector('table').getBoundingClientRect().right}));
return {fields, boxes, pageWidth: document.documentElement.scrollWidth, window: window.innerWidth,
        rows: document.querySelectorAll('#workers tr.worker').length,
        lostFiles: [...document.querySelectorAll('#lost-files li')].map(li => li.textContent),
        mounts: [...document.querySelectorAll('#mounts tr.mount')].map(r => ({
          mountpoint: r.dataset.mountpoint, metrics: r.querySelector('td.metrics a')?.href ?? null})),
        metricsLink: document.querySelector('a#metrics-link')?.href ?? null};
"""


def wait_for_page(driver: Chrome, condition: Callable[[dict[str, Any]], bool], what: str,
                  timeout: float) -> dict[str, Any]:
    """READ run until `condition` holds (one script run per read: the page reloads itself)."""
    deadline = time.monotonic() + timeout
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            state = driver.execute_script(READ)
            if condition(state):
                return state
        except WebDriverException:   # caught mid-reload: read again
            pass
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; page shows {state}")


@pytest.fixture
def browser() -> Iterator[Chrome]:
    with chromium(width=WIDTH, height=1000) as driver:
        yield driver


def _holder(cluster: Cluster, path: str) -> set[str]:
    client = cluster.client()
    return {w for block in client.master.get_blocks(client.fs.stat(path).ino).blocks for w in block.worker_ids}


def test_status_page_shows_replication_repair_mounts_and_fits_1200px(
        tmp_path: pathlib.Path, browser: Chrome) -> None:
    with Cluster(tmp_path / "c", workers=3, node_names=NODES, capacity="1GiB",
                 master_args=["--metrics-port", "-1", "--status-port", "-1"],
                 worker_args=["--metrics-port", "-1"]) as cluster:
        cluster.wait_for_live_workers(3)
        assert cluster.master is not None
        mountpoint = tmp_path / "mnt"
        mountpoint.mkdir()
        mount: RoleProcess = start("mount", curvine_command(
            "mount", "--master", cluster.master_address, str(mountpoint), "--metrics-port", "-1"),
            ready_prefix="mounted=")
        try:
            client = cluster.client()
            client.fs.mkdir("/single")
            client.fs.set_policy("/single", Policy(replicas=1))
            with client.fs.open("/single/only-copy.bin", "wb") as handle:
                handle.write(random_bytes(1 << 20, seed=1))
            [victim] = _holder(cluster, "/single/only-copy.bin")
            client.fs.mkdir("/durable")
            for n in range(20):   # a two-replica file with one copy on the victim: repaired after it
                path = f"/durable/f{n}.bin"
                with client.fs.open(path, "wb") as handle:
                    handle.write(random_bytes(1 << 20, seed=10 + n))
                if victim in _holder(cluster, path):
                    break
            else:
                raise AssertionError("no two-replica file placed a copy on the victim")
            index = next(i for i in range(3) if cluster.worker_id(i) == victim)
            wait_until(lambda: any(m.mountpoint == str(mountpoint) for m in client.master.report().mounts), 15,
                       "the mount is listed")
            cluster.kill_worker(index)

            browser.get(f"http://{cluster.master.field('status')}/")
            state = wait_for_page(browser, lambda s: s["rows"] == 3 and s["fields"].get("r:lost") == "1"
                                  and int(s["fields"].get("r:repaired-blocks", "0")) >= 1,
                                  "a lost block and a repaired one", timeout=60)
            report = client.master.report()
            assert state["fields"]["lost-blocks"] == "1" and state["fields"]["workers"] == "2 / 3"
            assert state["fields"]["r:under-replicated"] == f"{report.replication.under_replicated:,}"
            assert state["fields"]["r:repair-rate"] == "64.0 MiB/s"
            assert state["lostFiles"] == ["/single/only-copy.bin"]
            assert [m["mountpoint"] for m in state["mounts"]] == [str(mountpoint)]
            assert state["mounts"][0]["metrics"] and state["fields"]["mounts"] == "1"

            # The /metrics link leads to the master's exporter: Prometheus text with the build info.
            with urllib.request.urlopen(state["metricsLink"], timeout=10) as reply:
                families = {f.name: f for f in text_string_to_metric_families(reply.read().decode())}
            [build] = families["curvine_build_info"].samples
            assert build.labels["role"] == "master" and "process_resident_memory_bytes" in families

            # Nothing overflows at 1200 px: the page, and each table inside its box.
            assert state["window"] == WIDTH and state["pageWidth"] <= WIDTH, state
            for box in state["boxes"]:
                assert box["scroll"] <= box["client"] and box["right"] <= WIDTH, box
            shot = browser.get_screenshot_as_png()
            (tmp_path / "status-1200.png").write_bytes(shot)
            assert Image.open(io.BytesIO(shot)).size[0] == WIDTH
            table = browser.find_element(By.ID, "workers")
            image = Image.open(io.BytesIO(table.screenshot_as_png))
            (tmp_path / "workers-1200.png").write_bytes(table.screenshot_as_png)
            # The whole table is in the shot, its right border (the table's own grey) within the window.
            assert image.size[0] <= WIDTH and table.rect["x"] + table.rect["width"] <= WIDTH
            right = [image.getpixel((image.size[0] - 1, y))[:3] for y in range(0, image.size[1], 4)]
            assert all(pixel[0] < 250 for pixel in right), "the table's right border is not in the shot"
        finally:
            mount.stop()
