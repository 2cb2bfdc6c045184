"""`curvine-py bench failover`: how long the namespace is unwritable when the leading master dies,
hangs, or loses its database for a moment.

Subject: two masters on one PostgreSQL database (a throwaway cluster, tests/pgserver.py), one
long-lived client with both addresses (made before the event, used throughout); then the time until
the first create through the list succeeds, for three events:
- kill -9 of the leader (the standby takes the advisory lock, builds the master, takes the port over);
- SIGSTOP of the leader (its session stays open; its leader lease runs out, the standby
  ends that session and takes over; the client's keepalive and who-leads probe move it there). The
  stopped leader is then continued and must step down (exit 3);
- a PostgreSQL restart (fast shutdown, started again at once): every session is cut, one master
  leads again (the old leader if it reconnects first, else the standby, and the old one exits 3).
Baseline, in the same run and interleaved: one master only, killed -9 and started again by hand
(what an operator or a supervisor without a standby does at best: the new process opens the
database and serves); the time from the kill to the first successful create. The ratio is
baseline / subject (above 1: the standby is faster than a restart).

The floor: the standby's lock retry period (master/standby.py RETRY_S) plus PostgreSQL noticing
the dead session (immediate for a kill -9 on loopback: the socket closes); for SIGSTOP, the leader
lease (--leader-lease-ms, LEASE_MS here) on top.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import signal
import tempfile
import time
from typing import Any

from bench import common
from curvine_py.client import CurvineClient
from curvine_py.core.errors import CurvineError
from curvine_py.master.standby import EXIT_LOST_LEADERSHIP, RETRY_S
from curvine_py.procs import RoleProcess, curvine_command, start
from tests import pgserver
from tests.harness import FAST_TIMERS

POLL_S = 0.02
LEASE_MS = 2000


def _master(root: pathlib.Path, name: str, url: str, *, ready: str, port: int = 0) -> RoleProcess:
    return start(name, curvine_command("master", "--data-dir", str(root / name), "--port", str(port),
                                       "--meta", url, "--leader-lease-ms", str(LEASE_MS), *FAST_TIMERS),
                 ready_prefix=ready)


def _until_create(client: CurvineClient, tag: str, limit_s: float = 60.0) -> float:
    """Seconds until a create succeeds (each attempt bounded by the client's own deadline)."""
    started = time.monotonic()
    attempt = 0
    while time.monotonic() - started < limit_s:
        attempt += 1
        try:
            client.fs.mkdir(f"/{tag}-{attempt}")
            return time.monotonic() - started
        except CurvineError:
            time.sleep(POLL_S)
    raise RuntimeError(f"no create succeeded within {limit_s} s")


def standby_takeover(pg: pgserver.PgServer, root: pathlib.Path, index: int) -> float:
    url = pg.url(f"standby{index}")
    leader = _master(root, f"s{index}a", url, ready="master=")
    standby = _master(root, f"s{index}b", url, ready="standby=")
    client = CurvineClient(f"{leader.address},{standby.address}", rpc_timeout_s=2.0)
    try:
        client.fs.mkdir("/before")
        started = time.monotonic()
        leader.kill()
        _until_create(client, "after")
        return time.monotonic() - started
    finally:
        client.close()
        leader.kill()
        standby.stop()


def standby_after_sigstop(pg: pgserver.PgServer, root: pathlib.Path, index: int) -> float:
    url = pg.url(f"stopped{index}")
    leader = _master(root, f"t{index}a", url, ready="master=")
    standby = _master(root, f"t{index}b", url, ready="standby=")
    client = CurvineClient(f"{leader.address},{standby.address}", rpc_timeout_s=2.0)
    continued = False
    try:
        client.fs.mkdir("/before")
        started = time.monotonic()
        os.kill(leader.process.pid, signal.SIGSTOP)
        _until_create(client, "after")
        took = time.monotonic() - started
        os.kill(leader.process.pid, signal.SIGCONT)
        continued = True
        code = leader.process.wait(30)
        if code != EXIT_LOST_LEADERSHIP:
            raise RuntimeError(f"the continued old leader exited {code}, not {EXIT_LOST_LEADERSHIP}")
        return took
    finally:
        if not continued:
            os.kill(leader.process.pid, signal.SIGCONT)
        client.close()
        leader.kill()
        standby.stop()


def postgres_restart(pg: pgserver.PgServer, root: pathlib.Path, index: int) -> float:
    url = pg.url(f"pgrestart{index}")
    leader = _master(root, f"p{index}a", url, ready="master=")
    standby = _master(root, f"p{index}b", url, ready="standby=")
    client = CurvineClient(f"{leader.address},{standby.address}", rpc_timeout_s=2.0)
    try:
        client.fs.mkdir("/before")
        started = time.monotonic()
        pg.restart()
        _until_create(client, "after")
        return time.monotonic() - started
    finally:
        client.close()
        leader.kill()
        standby.stop()


def restart_by_hand(pg: pgserver.PgServer, root: pathlib.Path, index: int) -> float:
    url = pg.url(f"restart{index}")
    first = _master(root, f"r{index}", url, ready="master=")
    port = int(first.address.rsplit(":", 1)[1])
    client = CurvineClient(first.address, rpc_timeout_s=2.0)
    second: RoleProcess | None = None
    try:
        client.fs.mkdir("/before")
        started = time.monotonic()
        first.kill()
        second = _master(root, f"r{index}", url, ready="master=", port=port)
        _until_create(client, "after")
        return time.monotonic() - started
    finally:
        client.close()
        first.kill()
        if second is not None:
            second.stop()


def run(args: argparse.Namespace) -> dict[str, Any]:
    repeats = 3 if args.quick else args.repeats
    root = pathlib.Path(tempfile.mkdtemp(prefix="curvine-bench-failover-"))
    standby: list[float] = []
    restart: list[float] = []
    stopped: list[float] = []
    pg_restart: list[float] = []
    samples = {standby_takeover: standby, restart_by_hand: restart, standby_after_sigstop: stopped,
               postgres_restart: pg_restart}
    with pgserver.PgServer(root / "pg") as pg:
        for index in range(repeats):
            order = (standby_takeover, restart_by_hand) if index % 2 else (restart_by_hand, standby_takeover)
            for fn in (*order, standby_after_sigstop, postgres_restart):
                seconds = fn(pg, root, index)
                samples[fn].append(seconds)
                print(f"repeat {index}: {fn.__name__} {seconds:.2f} s", flush=True)
    # Lower is better for both: the ratio is baseline / subject so that above 1 means faster.
    ratios = [r / s for s, r in zip(standby, restart, strict=True) if s > 0]
    return {
        "machine": common.machine(),
        "repeats": repeats,
        "standby_takeover_s": {"median": common.median(standby), "samples": standby},
        "restart_by_hand_s": {"median": common.median(restart), "samples": restart},
        "restart_over_takeover": {"median": common.median(ratios), "min": min(ratios), "max": max(ratios)},
        "standby_after_sigstop_s": {"median": common.median(stopped), "samples": stopped},
        "postgres_restart_s": {"median": common.median(pg_restart), "samples": pg_restart},
        "floor_s": RETRY_S,
        "leader_lease_ms": LEASE_MS,
    }


def doc_body(result: dict[str, Any]) -> str:
    takeover, restart = result["standby_takeover_s"], result["restart_by_hand_s"]
    rows = [
        ("standby takes over (2 masters, one PostgreSQL)", f"{takeover['median']:.2f} s",
         " / ".join(f"{x:.2f}" for x in takeover["samples"])),
        ("baseline: the one master killed and started again", f"{restart['median']:.2f} s",
         " / ".join(f"{x:.2f}" for x in restart["samples"])),
    ]
    for key, what in (("standby_after_sigstop_s", "leader SIGSTOPped: lease runs out, standby takes over"),
                      ("postgres_restart_s", "PostgreSQL restarted (fast), both masters on it")):
        if key in result:
            case = result[key]
            rows.append((what, f"{case['median']:.2f} s", " / ".join(f"{x:.2f}" for x in case["samples"])))
    ratio = result["restart_over_takeover"]
    return "\n".join([
        "## Master failover (bench failover)",
        "",
        common.machine_line(result["machine"]),
        "",
        ("Event -> first successful create through one long-lived client's list of masters "
        f"(median of {result['repeats']}, each attempt bounded by a 2 s deadline, polled every "
        f"{POLL_S * 1000:.0f} ms). The floor is the standby's lock retry period, {result['floor_s']:g} s; "
        f"for SIGSTOP add the leader lease, {result.get('leader_lease_ms', LEASE_MS)} ms. The SIGSTOPped "
        "leader, continued afterwards, exited 3 (stepped down) in every repeat."),
        "",
        common.table(("case", "median", "samples"), rows),
        "",
        (f"A restart by hand takes {ratio['median']:.2f}x the standby's takeover "
        f"(per-repeat ratios {ratio['min']:.2f}-{ratio['max']:.2f}x), and it needs someone or "
        "something to start the process; with a standby nobody has to. Target: the other "
        f"master serves within 5 s: {'met' if takeover['median'] < 5 else 'missed'}."),
        *([f"Issue 24 (a hung leader): the same client creates again within 10 s (target 5 s) of a "
           f"SIGSTOP: median {result['standby_after_sigstop_s']['median']:.2f} s, "
           f"max {max(result['standby_after_sigstop_s']['samples']):.2f} s."]
          if "standby_after_sigstop_s" in result else []),
    ])


def main(argv: list[str]) -> int:
    args = common.parser("failover", __doc__ or "", repeats=5).parse_args(argv)
    result = run(args)
    common.publish("failover", args, result, doc_body(result))
    return 0
