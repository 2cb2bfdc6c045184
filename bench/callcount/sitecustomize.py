"""Counts the Python and C calls of a `curvine-py mount` process by bench phase (bench/fuse_calls.py
puts this directory on the mount's PYTHONPATH; Python imports `sitecustomize` at start-up).

Active only when CALLCOUNT_DIR is set and the process is a `curvine-py ROLE` of CALLCOUNT_ROLE
(default: mount). The phase is what
bench/fuse_rows.py writes to CALLCOUNT_DIR/phase (its STATGAP_PROF hook), re-read every 50 ms by a
thread that also writes the counts to CALLCOUNT_DIR/counts-PID.json once a second. The profile hook
makes the process several times slower: counts are the measure here, never time.
"""
from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from types import FrameType
from typing import Any

_DIR = os.environ.get("CALLCOUNT_DIR")


def _start(where: str) -> None:
    phase = ["setup"]
    counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            counts[(phase[0], "/".join(code.co_filename.split("/")[-2:]) + ":" + code.co_name)] += 1
        elif event == "c_call":
            counts[(phase[0], "C:" + getattr(arg, "__qualname__", "?"))] += 1

    def watch() -> None:
        phase_file = os.path.join(where, "phase")
        out = os.path.join(where, f"counts-{os.getpid()}.json")
        ticks = 0
        while True:
            time.sleep(0.05)
            try:
                with open(phase_file) as f:
                    phase[0] = f.read().strip() or "none"
            except OSError:
                pass
            ticks += 1
            if ticks % 20 == 0:
                snapshot: dict[str, dict[str, int]] = {}
                for (name, function), n in list(counts.items()):
                    snapshot.setdefault(name, {})[function] = n
                with open(out + ".tmp", "w") as f:
                    json.dump(snapshot, f)
                os.replace(out + ".tmp", out)

    threading.Thread(target=watch, daemon=True, name="callcount").start()
    sys.setprofile(profile)
    threading.setprofile(profile)


if _DIR and os.environ.get("CALLCOUNT_ROLE", "mount") in sys.argv[1:3]:
    _start(_DIR)
