"""`curvine-py up` with its observability on and with a port taken (issue 27), as processes:
--metrics-port and --status-port turn on every role's /metrics and the master's status page and
their URLs are among the ready lines (each scraped with the Prometheus text parser: process
collectors and build info on every role, and a getxattr miss on the mount is no error); a
taken port is named, cause first, before anything starts."""
from __future__ import annotations

import errno
import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from curvine_py.cli.up import start_failure
from curvine_py.core.errors import Unavailable
from curvine_py.procs import curvine_command, start


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def test_up_serves_metrics_and_status_and_prints_them(tmp_path: pathlib.Path) -> None:
    data_dir = tmp_path / "cv"
    up = start("up", curvine_command("up", "--data-dir", str(data_dir), "--master-port", "0", "--worker-port", "0",
                                     "--lm-port", "0", "--metrics-port", "-1", "--status-port", "-1"),
               ready_prefix="lmcache examples:", timeout=90)
    try:
        lines = [line for line in up.tail if line.startswith(("master=", "mount=", "metrics ", "status=", "lmcache "))]
        assert lines[0].startswith("master=") and lines[1].startswith("mount=")
        assert lines[2].startswith("metrics ") and lines[3].startswith("status=http://127.0.0.1:")
        urls = dict(token.split("=", 1) for token in lines[2].split()[1:])
        assert sorted(urls) == ["master", "mount", "worker"]
        assert all(url.startswith("http://127.0.0.1:") and url.endswith("/metrics") for url in urls.values())

        # A getxattr miss through the mount: ENODATA for the caller, no error in the metrics.
        probe = data_dir / "mnt" / "probe.txt"
        probe.write_text("x")
        for _ in range(3):
            with pytest.raises(OSError) as caught:
                os.getxattr(probe, "user.no-such-attribute")
            assert caught.value.errno == errno.ENODATA
        for role, url in urls.items():
            families = scrape(url)
            [(labels, value)] = families["curvine_build_info"]
            assert labels["role"] == role and labels["version"] and value == 1.0
            for name in ("process_resident_memory_bytes", "process_cpu_seconds", "process_open_fds",
                         "process_max_fds", "process_start_time_seconds"):
                assert name in families and families[name][0][1] > 0, (role, name)
        mount = scrape(urls["mount"])
        getxattrs = {labels["op"]: value for labels, value in mount["curvine_mount_requests"]}.get("getxattr", 0)
        assert getxattrs >= 3
        assert not [labels for labels, _ in mount["curvine_errors"] if labels.get("code") == "ENODATA"]

        with urllib.request.urlopen(lines[3].split("=", 1)[1], timeout=10) as reply:
            page = reply.read().decode()
        assert 'id="workers"' in page and 'id="mounts"' in page and 'id="metrics-link"' in page
    finally:
        up.process.send_signal(signal.SIGINT)
        assert up.process.wait(30) == 0


def test_up_with_its_port_taken_names_the_cause_first(tmp_path: pathlib.Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        for flags in (["--master-port", str(port), "--worker-port", "0"],
                      ["--master-port", "0", "--worker-port", "0", "--metrics-port", str(port)]):
            started = time.monotonic()
            result = subprocess.run(curvine_command("up", "--data-dir", str(tmp_path / "cv"), "--no-mount",
                                                    "--no-lm", *flags),
                                    capture_output=True, text=True, timeout=60, check=False)
            assert time.monotonic() - started < 15
            assert result.returncode == 2
            first = result.stderr.splitlines()[0]
            assert first.startswith(f"curvine-py up: address in use: 127.0.0.1:{port} ({flags[-2] if '--metrics-port' in flags else '--master-port'}"), first
            assert "did not become ready" not in result.stderr
        assert not (tmp_path / "cv" / "master").exists()    # nothing was started


def test_a_child_that_dies_on_a_taken_port_is_reported_by_its_cause() -> None:
    # What procs.start says when the master exits at once (a port taken between the check and
    # the bind): the cause leads, not "did not become ready within 30s".
    output = ("2026-12-07 INFO master: metadata engine sqlite:///x\n"
              "E1207 add_port.cc:83] Failed to add port to server: No address added out of total 1 resolved for "
              "'127.0.0.1:18995' (Error in bind for address '[::ffff:127.0.0.1]:18995': Address already in use)\n"
              "2026-12-07 ERROR master: cannot listen on 127.0.0.1:18995: Failed to bind to address")
    message = start_failure(Unavailable(f"master did not become ready within 30s (exit code 2):\n{output}"))
    assert message.startswith("address in use: the master cannot listen on 127.0.0.1:18995")
    assert "did not become ready" not in message and output in message
    died = start_failure(Unavailable("worker did not become ready within 30s (exit code 1):\nboom"))
    assert died.startswith("the worker exited with code 1 while starting")
    silent = "mount did not become ready within 30s (exit code -9):\n..."
    assert start_failure(Unavailable(silent)) == silent
