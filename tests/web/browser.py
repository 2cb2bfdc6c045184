"""Debian's headless Chromium driven by selenium through Debian's chromium-driver (no browser or
driver download: both paths are explicit, so Selenium Manager never runs).

As root Chromium refuses to start without --no-sandbox; the other flags keep it from reaching the
network on its own (component updates, sync, background fetches) and from sharing a profile with
another run (a fresh --user-data-dir each time).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = os.environ.get("CURVINE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CURVINE_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")


def missing() -> str:
    """What is not installed ('' when both are), for a clear failure message."""
    absent = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    return ", ".join(absent) and f"{', '.join(absent)} missing: apt-get install chromium chromium-driver " \
        "(scripts/setup.sh does)"


@contextlib.contextmanager
def chromium(width: int = 1280, height: int = 800) -> Iterator[webdriver.Chrome]:
    if why := missing():
        raise RuntimeError(why)
    profile = tempfile.mkdtemp(prefix="curvine-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
