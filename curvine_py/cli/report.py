"""`curvine-py report [--json]`: workers (live and lost), capacity, usage, health."""
from __future__ import annotations

import argparse
import json
import time

from google.protobuf.json_format import MessageToDict

from curvine_py.cli.common import add_client_options, client_from, run_tool


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="curvine-py report", description=__doc__)
    add_client_options(p)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    def body() -> int:
        with client_from(args) as client:
            report = client.master.report()
        if args.json:
            print(json.dumps(MessageToDict(report, always_print_fields_with_no_presence=True), indent=2))
            return 0
        live = sum(1 for w in report.workers if w.live)
        print(f"cluster {report.cluster_id}  epoch {report.epoch}  workers {live} live / {len(report.workers)}")
        print(f"capacity {report.capacity}  used {report.used}  available {report.available}")
        print(f"files {report.files}  directories {report.directories}  blocks {report.blocks}  "
              f"directory leases {report.dir_leases}")
        now = time.time() * 1000
        for w in report.workers:
            age = (now - w.last_heartbeat_ms) / 1000 if w.last_heartbeat_ms else float("nan")
            state = "live" if w.live else "LOST"
            print(f"  {w.worker_id:<18} {state:<4} {w.host}:{w.port:<6} node={w.node} "
                  f"used={w.used}/{w.capacity} objects={w.objects} blocks={w.blocks} "
                  f"evictions={w.evictions} heartbeat={age:.1f}s ago")
            if w.live:
                print(f"  {'':<18} disk reserve {w.free_space_ratio:.0%} of the file system = "
                      f"{w.reserve_bytes} bytes kept free (free now {w.fs_free_bytes})")
        r = report.replication
        print(f"replication: {r.under_replicated} under-replicated, {r.lost} lost, {r.surplus} surplus blocks; "
              f"repaired {r.repaired_blocks} blocks ({r.repaired_bytes} bytes), {r.repair_failures} failed copies, "
              f"repair rate {r.repair_rate or 'off'}")
        for path in r.lost_files:
            print(f"  LOST (no live copy of a block): {path}")
        if r.last_error:
            print(f"  last repair error: {r.last_error}")
        if report.quotas:
            print(f"quotas {len(report.quotas)}")
        for q in report.quotas:
            print(f"  {q.path:<30} bytes {q.used_bytes}/{q.max_bytes or 'unlimited'}  "
                  f"inodes {q.used_inodes}/{q.max_inodes or 'unlimited'}")
        return 0

    return run_tool("report", body)
