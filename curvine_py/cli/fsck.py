"""`curvine-py fsck --master HOST:PORT [--repair] [--scrub [--scrub-rate BYTES]] [--json]`: the
master's metadata against the workers' inventories and, with --scrub, against the stored bytes.

1. Every live worker is asked for its full block inventory again (it registers anew at its next
   heartbeat); the master reconciles each: recorded copies the worker does not have are dropped
   from the metadata (missing); blocks it holds that nothing references (orphans) are counted and
   left on it, or deleted with --repair (fsck without --repair changes no stored data).
2. With --scrub: every recorded copy on a live worker is re-read and verified by that worker
   (data-plane SCRUB, chunk by chunk against the digests written with it), page by page through
   the master at --scrub-rate verified bytes/s for the whole cluster. A corrupt copy is dropped
   by its worker (never served) and from the metadata, and named in the output. Then every live
   worker verifies its KV objects (which the master does not record), page by page at the same
   rate (data-plane SCRUB_KV); a corrupt object is dropped by its worker (a get misses, never
   returns wrong bytes) and named with its key and worker. KV objects are a cache: a dropped one
   is not repaired, the next put stores it again.
3. The metadata's own consistency check (names, links, blocks, locations, quota counters).
4. Replica counts against each directory's policy: under-replicated, lost (no live copy), surplus.
5. With --repair: repair rounds (re-replication at the master's --repair-rate: corrupt copies found
   by the scrub are copied back from a good replica) until nothing more can be fixed; what could
   not be (lost blocks, no worker left to take a copy) is said.

Exit 0 only when clean: no metadata problem, no missing, orphan or corrupt copy found (with
--repair: none left unfixed), no corrupt KV object, no copy or worker the scrub could not check,
nothing under-replicated or lost.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from curvine_py.cli.common import add_client_options, client_from, run_tool
from curvine_py.client import CurvineClient
from curvine_py.client.master import MasterClient
from curvine_py.client.membership import WorkerAddress
from curvine_py.client.workerio import WorkerIO
from curvine_py.config import parse_size
from curvine_py.core.cluster import CorruptCopy, FsckReport, Inventory
from curvine_py.core import frames
from curvine_py.core.errors import CurvineError, Timeout
from curvine_py.rpc.convert import fsck_as_dict, inventory_as_dict

INVENTORY_DEADLINE_S = 60.0     # workers re-register at their next heartbeat (1 s by default)
REPAIR_DEADLINE_S = 600.0
POLL_S = 0.2
REPAIR_RPC_TIMEOUT_S = 300.0    # one repair round copies up to a few hundred blocks
SCRUB_RPC_TIMEOUT_S = 120.0     # one page is ~5 s of work on the master, plus one copy's verify
DEFAULT_SCRUB_RATE = "64MiB"
KV_PAGE_S = 2.0                 # a SCRUB_KV page's bytes: this many seconds at the scrub rate
KV_PAGE_MIN = 1024 * 1024       # ...but at least this many (a page verifies one object at least)
KV_PAGE_UNLIMITED = 256 * 1024 * 1024
SHOWN = 50                      # corrupt/missing copies and errors listed in the text output


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py fsck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_client_options(p)
    p.add_argument("--repair", action="store_true",
                   help="fix what can be fixed (re-replicate, delete orphan blocks on the workers)")
    p.add_argument("--scrub", action="store_true", help="have the workers re-read and verify every stored copy")
    p.add_argument("--scrub-rate", default=DEFAULT_SCRUB_RATE,
                   help=f"verified bytes/s for the whole cluster (default {DEFAULT_SCRUB_RATE}, 0 = unlimited)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    return p


@dataclass(slots=True)
class ScrubTotals:
    copies: int = 0
    bytes: int = 0
    skipped: int = 0
    corrupt: list[CorruptCopy] = field(default_factory=list)
    missing: list[CorruptCopy] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    kv_objects: int = 0
    kv_bytes: int = 0
    kv_corrupt: list[tuple[str, str]] = field(default_factory=list)    # (worker id, key)

    def as_dict(self) -> dict[str, Any]:
        def copy(c: CorruptCopy) -> dict[str, Any]:
            return {"blockId": f"{c.block_id:x}", "workerId": c.worker_id, "path": c.path, "reason": c.reason}
        return {"copies": self.copies, "bytes": self.bytes, "skipped": self.skipped,
                "corrupt": [copy(c) for c in self.corrupt], "missing": [copy(c) for c in self.missing],
                "errors": self.errors, "kvObjects": self.kv_objects, "kvBytes": self.kv_bytes,
                "kvCorrupt": [{"workerId": w, "key": k} for w, k in self.kv_corrupt]}


def collect_inventories(master: MasterClient, deadline_s: float = INVENTORY_DEADLINE_S, *,
                        delete_orphans: bool = False) -> FsckReport:
    reply = master.fsck(rescan=True, delete_orphans=delete_orphans)
    deadline = time.monotonic() + deadline_s
    while reply.pending:
        if time.monotonic() > deadline:
            raise Timeout(f"workers {list(reply.pending)} did not send their inventory in {deadline_s:.0f}s")
        time.sleep(POLL_S)
        reply = master.fsck()
    return reply


def scrub(master: MasterClient, rate: int) -> ScrubTotals:
    """Every recorded copy verified, page by page (the master keeps the pace)."""
    totals, after = ScrubTotals(), 0
    while True:
        page = master.scrub_page(after, rate, timeout_s=SCRUB_RPC_TIMEOUT_S)
        totals.copies += page.copies
        totals.bytes += page.bytes
        totals.skipped += page.skipped
        totals.corrupt += list(page.corrupt)
        totals.missing += list(page.missing)
        totals.errors += list(page.errors)
        if page.done:
            return totals
        after = page.next_after


def scrub_kv(client: CurvineClient, rate: int, totals: ScrubTotals) -> None:
    """Every live worker verifies its KV objects, one worker after another (so `rate` holds for the
    whole cluster), page by page. A worker that fails to answer is named in the errors."""
    budget = max(KV_PAGE_MIN, int(rate * KV_PAGE_S)) if rate else KV_PAGE_UNLIMITED
    # The client's data timeout bounds each wait: a page (one large object at a slow rate) may
    # take longer than a get, so these calls wait up to SCRUB_RPC_TIMEOUT_S.
    io = WorkerIO(dataclasses.replace(client.config, data_timeout_s=SCRUB_RPC_TIMEOUT_S, short_circuit=False),
                  client.node)
    try:
        for worker_id, worker in sorted(client.membership.refresh().workers.items()):
            _scrub_worker_kv(io, worker_id, worker, budget, rate, totals)
    finally:
        io.close()


def _scrub_worker_kv(io: WorkerIO, worker_id: str, worker: WorkerAddress, budget: int, rate: int,
                     totals: ScrubTotals) -> None:
    after = ""
    while True:
        try:
            reply = frames.scrub_kv_page(io.call(worker, frames.Op.SCRUB_KV,
                                                 frames.scrub_kv_request(after, budget, rate)).header)
        except CurvineError as exc:
            totals.errors.append(f"KV objects on worker {worker_id}: {exc.message}")
            return
        totals.kv_objects += reply.objects
        totals.kv_bytes += reply.bytes
        totals.kv_corrupt += [(worker_id, key) for key in reply.corrupt]
        if reply.done:
            return
        if reply.next_after <= after:
            totals.errors.append(f"KV objects on worker {worker_id}: the scrub made no progress after {after!r}")
            return
        after = reply.next_after


def repair(master: MasterClient, deadline_s: float = REPAIR_DEADLINE_S) -> tuple[FsckReport, int, list[str]]:
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


def clean(reply: FsckReport, inventories: list[Inventory], scrubbed: ScrubTotals | None = None,
          *, repaired: bool = False) -> bool:
    """With `repaired`, what the inventories and the scrub found counts only through what is left."""
    r = reply.replication
    found = not repaired and any(i.missing or i.orphans for i in inventories)
    if scrubbed is not None:
        found = found or bool(scrubbed.errors or scrubbed.kv_corrupt) or \
            (not repaired and bool(scrubbed.corrupt or scrubbed.missing))
    return not reply.problems and not found and not r.under_replicated and not r.lost


def _copy_line(kind: str, c: CorruptCopy) -> str:
    return f"{kind}: block {c.block_id:x} on worker {c.worker_id} ({c.path or '<no name>'}): {c.reason}"


def render(reply: FsckReport, inventories: list[Inventory], repaired: bool, copied: int,
           errors: list[str], scrubbed: ScrubTotals | None = None) -> str:
    lines = []
    for inv in inventories:
        fate = "deleted on the worker" if inv.orphans_deleted else "left on the worker; --repair deletes them"
        lines.append(f"worker {inv.worker_id}: {inv.reported} blocks; {inv.missing} recorded copies missing "
                     f"(dropped from the metadata), {inv.orphans} orphan blocks ({fate})")
    if scrubbed is not None:
        lines.append(f"scrub: {scrubbed.copies} copies verified ({scrubbed.bytes} bytes), {len(scrubbed.corrupt)} "
                     f"corrupt (dropped), {len(scrubbed.missing)} missing, {len(scrubbed.errors)} not checked, "
                     f"{scrubbed.skipped} on workers not live")
        lines += [_copy_line("CORRUPT", c) for c in scrubbed.corrupt[:SHOWN]]
        lines.append(f"scrub: {scrubbed.kv_objects} KV objects verified ({scrubbed.kv_bytes} bytes), "
                     f"{len(scrubbed.kv_corrupt)} corrupt (dropped, never served: a get misses unless "
                     "another replica holds the key)")
        lines += [f"CORRUPT: KV object {key!r} on worker {worker}" for worker, key in scrubbed.kv_corrupt[:SHOWN]]
        if len(scrubbed.kv_corrupt) > SHOWN:
            lines.append(f"... and {len(scrubbed.kv_corrupt) - SHOWN} more corrupt KV objects (--json lists all)")
        lines += [_copy_line("MISSING", c) for c in scrubbed.missing[:SHOWN]]
        lines += [f"NOT CHECKED: {e}" for e in scrubbed.errors[:SHOWN]]
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
        rate = parse_size(args.scrub_rate)
        with client_from(args) as client:
            reply = collect_inventories(client.master, delete_orphans=args.repair)
            inventories = list(reply.inventories)
            scrubbed = scrub(client.master, rate) if args.scrub else None
            if scrubbed is not None:
                scrub_kv(client, rate, scrubbed)
            copied, errors = 0, list[str]()
            if args.repair:
                reply, copied, errors = repair(client.master)
            elif scrubbed is not None:
                reply = client.master.fsck()      # the replica counts after the scrub dropped copies
        ok = clean(reply, inventories, scrubbed, repaired=args.repair)
        if args.json:
            out = fsck_as_dict(reply)
            out["inventories"] = [inventory_as_dict(i) for i in inventories]
            out.update(clean=ok, copied=copied, errors=errors)
            if scrubbed is not None:
                out["scrub"] = scrubbed.as_dict()
            print(json.dumps(out, indent=2))
        else:
            print(render(reply, inventories, args.repair, copied, errors, scrubbed))
            print("clean" if ok else "NOT clean", file=sys.stderr if not ok else sys.stdout)
        return 0 if ok else 1

    return run_tool("fsck", body)
