"""`curvine-py fsck --master HOST:PORT [--repair] [--scrub] [--json]`: the master's metadata against
the workers' inventories.

1. Every live worker is asked for its full block inventory again (it registers anew at its next
   heartbeat); the master reconciles each: recorded copies the worker does not have are dropped
   from the metadata (missing), blocks it holds that nothing references are deleted on it (orphan).
2. The metadata's own consistency check (names, links, blocks, locations, quota counters).
3. Replica counts against each directory's policy: under-replicated, lost (no live copy), surplus.
4. With --repair: repair rounds (re-replication at the master's --repair-rate) until nothing more
   can be fixed; what could not be (lost blocks, no worker left to take a copy) is said.

Exit 0 only when clean: no metadata problem, no missing or orphan copy found, nothing under-
replicated or lost. --scrub (re-reading and verifying every stored byte on the workers) needs a
verify operation in the workers' data plane, which they do not have yet: it answers NotSupported.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from google.protobuf.json_format import MessageToDict

from curvine_py.cli.common import add_client_options, client_from, run_tool
from curvine_py.client.master import MasterClient
from curvine_py.core.errors import NotSupported, Timeout
from curvine_py.proto.curvine.v1 import master_pb2 as pb

INVENTORY_DEADLINE_S = 60.0     # workers re-register at their next heartbeat (1 s by default)
REPAIR_DEADLINE_S = 600.0
POLL_S = 0.2
REPAIR_RPC_TIMEOUT_S = 300.0    # one repair round copies up to a few hundred blocks


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py fsck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_client_options(p)
    p.add_argument("--repair", action="store_true", help="fix what can be fixed (re-replicate)")
    p.add_argument("--scrub", action="store_true", help="re-read and verify stored bytes (not supported yet)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    return p


def collect_inventories(master: MasterClient, deadline_s: float = INVENTORY_DEADLINE_S) -> pb.FsckReply:
    reply = master.fsck(rescan=True)
    deadline = time.monotonic() + deadline_s
    while reply.pending:
        if time.monotonic() > deadline:
            raise Timeout(f"workers {list(reply.pending)} did not send their inventory in {deadline_s:.0f}s")
        time.sleep(POLL_S)
        reply = master.fsck()
    return reply


def repair(master: MasterClient, deadline_s: float = REPAIR_DEADLINE_S) -> tuple[pb.FsckReply, int, list[str]]:
    """Repair rounds until nothing is under-replicated or a round makes no progress. Returns the
    last reply, the copies made and the errors seen."""
    copied, errors = 0, list[str]()
    deadline = time.monotonic() + deadline_s
    while True:
        reply = master.fsck(repair=True, timeout_s=REPAIR_RPC_TIMEOUT_S)
        copied += reply.copied
        errors += list(reply.errors)
        if not reply.replication.under_replicated and not reply.replication.surplus:
            return reply, copied, errors
        if not reply.throttled and not reply.copied and not reply.dropped:
            return reply, copied, errors        # no progress: the rest cannot be fixed now
        if time.monotonic() > deadline:
            errors.append(f"repair still going after {deadline_s:.0f}s: stopped")
            return reply, copied, errors
        if reply.throttled:
            time.sleep(POLL_S)


def clean(reply: pb.FsckReply, inventories: list[pb.WorkerInventory]) -> bool:
    r = reply.replication
    found = any(i.missing or i.orphans for i in inventories)
    return not reply.problems and not found and not r.under_replicated and not r.lost


def render(reply: pb.FsckReply, inventories: list[pb.WorkerInventory], repaired: bool, copied: int,
           errors: list[str]) -> str:
    lines = []
    for inv in inventories:
        lines.append(f"worker {inv.worker_id}: {inv.reported} blocks; {inv.missing} recorded copies missing "
                     f"(dropped from the metadata), {inv.orphans} orphan blocks (deleted on the worker)")
    lines += [f"METADATA: {problem}" for problem in reply.problems]
    r = reply.replication
    lines.append(f"blocks: {r.under_replicated} under-replicated, {r.lost} lost, {r.surplus} surplus")
    lines += [f"LOST: {path} has a block with no live copy" for path in r.lost_files]
    if repaired:
        lines.append(f"repair: {copied} copies made")
        if r.lost:
            lines.append(f"could not repair: {r.lost} blocks have no live copy left to copy from")
        if reply.unplaceable:
            lines.append(f"could not repair: {reply.unplaceable} blocks need more workers than are live")
        if r.under_replicated and not reply.unplaceable:
            lines.append(f"could not repair: {r.under_replicated} blocks still under-replicated "
                         "(copies failed, see below)")
        lines += [f"  error: {e}" for e in errors[-20:]]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)

    def body() -> int:
        if args.scrub:
            raise NotSupported("--scrub needs the workers to verify their stored bytes, which their data plane "
                               "cannot do yet; run fsck without --scrub (reads still verify every byte)")
        with client_from(args) as client:
            reply = collect_inventories(client.master)
            inventories = list(reply.inventories)
            copied, errors = 0, list[str]()
            if args.repair:
                reply, copied, errors = repair(client.master)
        ok = clean(reply, []) if args.repair else clean(reply, inventories)
        if args.json:
            out = MessageToDict(reply, always_print_fields_with_no_presence=True)
            out["inventories"] = [MessageToDict(i, always_print_fields_with_no_presence=True) for i in inventories]
            out.update(clean=ok, copied=copied, errors=errors)
            print(json.dumps(out, indent=2))
        else:
            print(render(reply, inventories, args.repair, copied, errors))
            print("clean" if ok else "NOT clean", file=sys.stderr if not ok else sys.stdout)
        return 0 if ok else 1

    return run_tool("fsck", body)
