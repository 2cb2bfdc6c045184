#!/usr/bin/env python3
"""Refreshes docs/status.png: the status page a real master serves (`--status-port`), in Debian's
headless Chromium, for a cluster started here (a master and 2 workers on loopback, as tests/web
does) with a cache and a durable directory, two quotas, some KV objects, and one worker killed with
SIGKILL so the picture shows a lost row next to a healthy one.

    .venv/bin/python scripts/screenshot.py [--out docs/status.png]

Needs chromium and chromium-driver (scripts/setup.sh installs them).
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from curvine_py.client.master import MasterClient
from curvine_py.core.domain import Policy, StorageClass
from curvine_py.observe.roles import STATUS_MIN_AGE_S
from tests.harness import Cluster, wait_until
from tests.web.browser import chromium

MiB = 1 << 20


def populate(cluster: Cluster) -> None:
    client = cluster.client()
    client.fs.mkdir("/kvcache")
    client.fs.set_policy("/kvcache", Policy(storage_class=StorageClass.CACHE, ttl_ms=3_600_000))
    client.fs.mkdir("/models")
    client.fs.set_policy("/models", Policy(storage_class=StorageClass.DURABLE, replicas=2))
    client.fs.mkdir("/tenants")
    for tenant, limit in (("a", 256 * MiB), ("b", 0)):
        client.fs.mkdir(f"/tenants/{tenant}")
        client.fs.set_quota(f"/tenants/{tenant}", max_bytes=limit, max_inodes=10_000)
        with open(__file__, "rb") as source:
            payload = source.read()
        for index in range(3):
            with client.fs.open(f"/tenants/{tenant}/file{index}", "wb") as fh:
                fh.write(payload * 200)
    for index in range(24):
        client.kv.put(f"screenshot-chunk-{index}", bytes([index]) * (8 * MiB))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(REPO / "docs" / "status.png"))
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="curvine-screenshot-") as root, \
            Cluster(pathlib.Path(root), workers=2, capacity="512MiB", master_args=["--status-port", "-1"],
                    node_names=["gpu-node-a", "gpu-node-b"]) as cluster:
        cluster.wait_for_live_workers(2)
        populate(cluster)
        assert cluster.master is not None
        page = cluster.master.field("status")
        master = MasterClient(cluster.master_address)
        try:
            cluster.kill_worker(1)
            dead = cluster.worker_id(1)
            wait_until(lambda: not any(w.live for w in master.report().workers if w.worker_id == dead),
                       20, "the killed worker to be lost")
            time.sleep(STATUS_MIN_AGE_S + 0.5)   # past the master's report cache
            with chromium(width=1400, height=720) as browser:
                browser.get(f"http://{page}/")
                # The window's outer size includes what headless Chromium reserves outside the
                # viewport: grow it until the whole page fits in the viewport.
                for _ in range(3):
                    height = browser.execute_script("return document.documentElement.scrollHeight")
                    inner = browser.execute_script("return window.innerHeight")
                    if inner >= height:
                        break
                    size = browser.get_window_size()
                    browser.set_window_size(size["width"], size["height"] + int(height) - int(inner) + 16)
                out = pathlib.Path(args.out)
                out.parent.mkdir(parents=True, exist_ok=True)
                if not browser.save_screenshot(str(out)):
                    print(f"could not write {out}", file=sys.stderr)
                    return 1
        finally:
            master.close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
