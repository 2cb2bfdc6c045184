"""Renders a `StatusView` as one self-contained HTML page: inline CSS, no scripts, no external
assets (an operator's browser on a locked-down network loads it whole), refreshed by the browser
itself with `<meta http-equiv="refresh">`.

Every value from the cluster is HTML-escaped (node names and paths are user input). Elements carry
stable ids, classes and `data-` attributes (`#workers tr[data-worker-id]`, `data-health`,
`#summary [data-field]`, `#replication [data-field]`, `#lost-files`, `#mounts tr[data-mountpoint]`,
`#policies`, `#quotas`, `a#metrics-link`) so tests and scrapers read the DOM, not the prose.

Layout: every table fits the window down to about 1000 px (long ids, names and paths wrap; the
capacity bar is short); below that a table scrolls inside its own box, the page never sideways.
"""
from __future__ import annotations

import html

from curvine_py.core.domain import QuotaInfo
from curvine_py.observe.statusview import MountView, PolicyView, StatusView, WorkerView

DEFAULT_REFRESH_S = 2

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2330; background: #f6f7f9; }
h1 { font-size: 1.3em; margin: 0 0 .2em; } h2 { font-size: 1.05em; margin: 1.4em 0 .4em; }
.meta { color: #5b6474; font-size: .9em; }
.error { background: #fde2e1; border: 1px solid #d93025; padding: .6em .8em; border-radius: 4px; }
dl#summary, dl.cards { display: flex; flex-wrap: wrap; gap: .6em; margin: .8em 0; }
dl#summary div, dl.cards div { background: #fff; border: 1px solid #dde1e7; border-radius: 4px; padding: .4em .8em;
  min-width: 8em; }
dl#summary dt, dl.cards dt { color: #5b6474; font-size: .8em; }
dl#summary dd, dl.cards dd { margin: 0; font-size: 1.2em; }
.table { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; background: #fff; border: 1px solid #dde1e7; width: 100%; }
th, td { text-align: left; padding: .35em .5em; border-bottom: 1px solid #eceef2; white-space: nowrap; }
td.id, td.node, td.address, td.path, td.mountpoint, #lost-files li { white-space: normal;
  overflow-wrap: anywhere; }
td.id { font-family: ui-monospace, monospace; font-size: .85em; }
th { background: #eef0f4; font-weight: 600; font-size: .85em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.bar { width: 5em; height: .8em; background: #e4e7ec; border-radius: 3px; overflow: hidden;
  display: inline-block; vertical-align: middle; margin-right: .5em; }
.fill { height: 100%; background: #2f7d4f; }
.fill.warn { background: #d98e04; } .fill.crit { background: #d93025; }
.health { font-weight: 600; text-transform: uppercase; font-size: .8em; }
tr.health-healthy .health { color: #2f7d4f; } tr.health-late .health { color: #d98e04; }
tr.health-full .health { color: #d98e04; }
tr.health-lost { background: #fdecea; } tr.health-lost .health { color: #d93025; }
.none { color: #8a93a3; }
dd.bad { color: #d93025; font-weight: 600; } dd.warn { color: #d98e04; font-weight: 600; }
a { color: #1a5fb4; }
"""


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB' (IEC units, as the CLI's sizes)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _percent(ratio: float | None) -> str:
    return "<span class=\"none\" title=\"not reported by the workers\">not reported</span>" \
        if ratio is None else f"{ratio * 100:.1f}%"


def _age(ms: int | None) -> str:
    if ms is None:
        return "never"
    return f"{ms / 1000:.1f} s ago" if ms < 120_000 else f"{ms // 60_000} min ago"


def _meter(ratio: float) -> str:
    level = " crit" if ratio >= 0.95 else " warn" if ratio >= 0.8 else ""
    return (f'<span class="bar" role="meter" aria-valuenow="{ratio * 100:.1f}" aria-valuemin="0" '
            f'aria-valuemax="100"><span class="fill{level}" style="display:block;width:{ratio * 100:.1f}%">'
            "</span></span>")


def _bar(used: int, capacity: int) -> str:
    ratio = min(1.0, used / capacity) if capacity else 0.0
    return f"{_meter(ratio)}{human_bytes(used)} / {human_bytes(capacity)} ({ratio * 100:.0f}%)"


def _count(n: int) -> str:
    return f"{n:,}"


def _limit(used: int, limit: int, *, as_bytes: bool) -> str:
    """Usage against a quota limit (0 = unlimited: usage only, no bar)."""
    shown = human_bytes if as_bytes else _count
    if not limit:
        return f'{shown(used)} <span class="none">/ unlimited</span>'
    return f"{_meter(min(1.0, used / limit))}{shown(used)} / {shown(limit)} ({used / limit * 100:.0f}%)"


def _master_metrics(view: StatusView, metrics_host: str) -> str:
    if not view.metrics_port:
        return '<span id="metrics-link" class="none">master /metrics off (--metrics-port)</span>'
    host = metrics_host or view.master.rpartition(":")[0].strip("[]") or "127.0.0.1"
    url = html.escape(f"http://{'[' + host + ']' if ':' in host else host}:{view.metrics_port}/metrics", quote=True)
    return f'<a id="metrics-link" href="{url}">master /metrics</a>'


def _summary_item(field: str, label: str, value: str) -> str:
    return f'<div><dt>{label}</dt><dd data-field="{field}">{value}</dd></div>'


def _metrics_link(host: str, port: int) -> str:
    if not port:
        return '<span class="none">off</span>'
    url = html.escape(f"http://{'[' + host + ']' if ':' in host else host}:{port}/metrics", quote=True)
    return f'<a href="{url}">{port}</a>'


def _worker_row(w: WorkerView) -> str:
    e = html.escape
    lm = str(w.lm_port) if w.lm_port else '<span class="none">off</span>'
    return (f'<tr class="worker health-{w.health}" data-worker-id="{e(w.worker_id)}" '
            f'data-health="{w.health}">'
            f'<td class="node">{e(w.node)}</td><td class="id">{e(w.worker_id)}</td>'
            f'<td class="address">{e(w.address)}</td><td class="lm">{lm}</td>'
            f'<td class="health">{w.health}</td><td class="capacity">{_bar(w.used, w.capacity)}</td>'
            f'<td class="num objects">{w.objects:,}</td><td class="num blocks">{w.blocks:,}</td>'
            f'<td class="num evictions">{w.evictions:,}</td><td class="num hitrate">{_percent(w.hit_rate)}</td>'
            f'<td class="heartbeat">{_age(w.heartbeat_age_ms)}</td>'
            f'<td class="metrics">{_metrics_link(w.host, w.metrics_port)}</td></tr>')


def _mount_row(m: MountView) -> str:
    e = html.escape
    return (f'<tr class="mount" data-mountpoint="{e(m.mountpoint)}" data-node="{e(m.node)}">'
            f'<td class="node">{e(m.node)}</td><td class="mountpoint">{e(m.mountpoint)}</td>'
            f'<td class="metrics">{_metrics_link(m.node, m.metrics_port)}</td>'
            f'<td class="heartbeat">{_age(m.heartbeat_age_ms)}</td></tr>')


def _replication(view: StatusView) -> list[str]:
    """Under-replicated and lost blocks, surplus copies, and what the repair has done."""
    r = view.replication
    rate = f"{human_bytes(r.repair_rate)}/s" if r.repair_rate else '<span class="none">off</span>'

    def item(field: str, label: str, value: str, level: str = "") -> str:
        css = f' class="{level}"' if level else ""
        return f'<div><dt>{label}</dt><dd data-field="{field}"{css}>{value}</dd></div>'

    parts = ['<h2>Replication and repair</h2><dl id="replication" class="cards">',
             item("under-replicated", "under-replicated blocks", f"{r.under_replicated:,}",
                  "warn" if r.under_replicated else ""),
             item("lost", "lost blocks (no live copy)", f"{r.lost:,}", "bad" if r.lost else ""),
             item("surplus", "surplus copies", f"{r.surplus:,}"),
             item("repaired-blocks", "blocks repaired", f"{r.repaired_blocks:,}"),
             item("repaired-bytes", "bytes repaired", human_bytes(r.repaired_bytes)),
             item("repair-failures", "failed copies", f"{r.repair_failures:,}", "bad" if r.repair_failures else ""),
             item("repair-rate", "repair rate", rate), "</dl>"]
    if r.last_error:
        parts.append(f'<p class="error" id="repair-error">last repair error: {html.escape(r.last_error)}</p>')
    if r.lost_files:
        parts.append('<p>Files with a lost block:</p><ul id="lost-files">')
        parts += [f"<li>{html.escape(path)}</li>" for path in r.lost_files]
        parts.append("</ul>")
    return parts


def _policy_row(p: PolicyView) -> str:
    e = html.escape
    ttl = f"{p.ttl_ms / 1000:g} s" if p.ttl_ms else "none"
    replicas = str(p.replicas) if p.replicas else "default"
    return (f'<tr data-path="{e(p.path)}"><td class="path">{e(p.path)}</td>'
            f'<td class="class">{p.storage_class}</td><td class="num">{replicas}</td><td>{ttl}</td>'
            f'<td>{e(p.placement)}</td><td>{"lz4" if p.compress else "off"}</td></tr>')


def _quota_row(q: QuotaInfo) -> str:
    e = html.escape
    return (f'<tr data-path="{e(q.path)}"><td class="path">{e(q.path)}</td>'
            f'<td class="bytes">{_limit(q.used_bytes, q.max_bytes, as_bytes=True)}</td>'
            f'<td class="inodes">{_limit(q.used_inodes, q.max_inodes, as_bytes=False)}</td></tr>')


def render(view: StatusView, *, refresh_s: int = DEFAULT_REFRESH_S, generated: str = "",
           metrics_host: str = "") -> str:
    """The page; `metrics_host` is the host name the browser reached the page by (the master's
    /metrics is on the same host, on its own port), '' for the master's address."""
    e = html.escape
    parts = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
             f'<meta http-equiv="refresh" content="{int(refresh_s)}">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             # An empty inline icon: without it every refresh asks the server for /favicon.ico.
             '<link rel="icon" href="data:,">',
             f"<title>curvine-py status{' - ' + e(view.cluster_id) if view.cluster_id else ''}</title>",
             f"<style>{_CSS}</style></head><body>",
             "<h1>curvine-py cluster status</h1>",
             (f'<div class="meta">master {e(view.master) or "?"} &middot; cluster '
              f'{e(view.cluster_id) or "?"} &middot; {e(generated)} &middot; refreshes every {int(refresh_s)} s'
              f" &middot; {_master_metrics(view, metrics_host)}</div>")]
    if view.error:
        parts.append(f'<p class="error" id="error">cannot read the cluster report: {e(view.error)}</p>')
        parts.append("</body></html>")
        return "".join(parts)
    parts.append('<dl id="summary">')
    parts += [
        _summary_item("workers", "workers live / known", f"{view.live_workers} / {len(view.workers)}"),
        _summary_item("epoch", "membership epoch", str(view.epoch)),
        _summary_item("hit-rate", "hit rate", _percent(view.hit_rate)),
        _summary_item("evictions", "evictions", f"{view.evictions:,}"),
        _summary_item("used", "used / capacity", f"{human_bytes(view.used)} / {human_bytes(view.capacity)}"),
        _summary_item("files", "files", f"{view.files:,}"),
        _summary_item("directories", "directories", f"{view.directories:,}"),
        _summary_item("blocks", "blocks", f"{view.blocks:,}"),
        _summary_item("dir-leases", "directory leases", f"{view.dir_leases:,}"),
        _summary_item("under-replicated", "under-replicated blocks", f"{view.replication.under_replicated:,}"),
        _summary_item("lost-blocks", "lost blocks", f"{view.replication.lost:,}"),
        _summary_item("mounts", "mounts", f"{len(view.mounts):,}"),
    ]
    parts.append('</dl><h2>Workers</h2><div class="table">')
    parts.append('<table id="workers"><thead><tr><th>node</th><th>worker id</th><th>data plane</th>'
                 "<th>lm://</th><th>health</th><th>capacity</th><th>objects</th><th>blocks</th>"
                 "<th>evictions</th><th>hit rate</th><th>last heartbeat</th><th>metrics</th></tr></thead><tbody>")
    parts += [_worker_row(w) for w in view.workers]
    if not view.workers:
        parts.append('<tr><td colspan="12" class="none">no worker has registered</td></tr>')
    parts.append("</tbody></table></div>")
    parts += _replication(view)
    parts.append('<h2>Mounts</h2><div class="table"><table id="mounts"><thead><tr><th>node</th><th>mountpoint</th>'
                 "<th>metrics</th><th>last heartbeat</th></tr></thead><tbody>")
    parts += [_mount_row(m) for m in view.mounts]
    if not view.mounts:
        parts.append('<tr><td colspan="4" class="none">no mount heard from</td></tr>')
    parts.append('</tbody></table></div><h2>Directory policies</h2><div class="table">')
    parts.append('<table id="policies"><thead><tr><th>directory</th><th>class</th><th>replicas</th>'
                 "<th>TTL</th><th>placement</th><th>compression</th></tr></thead><tbody>")
    parts += [_policy_row(p) for p in view.policies]
    if not view.policies:
        parts.append('<tr><td colspan="6" class="none">no directory policy read</td></tr>')
    parts.append('</tbody></table></div><h2>Directory quotas</h2><div class="table">')
    parts.append('<table id="quotas"><thead><tr><th>directory</th><th>bytes</th><th>inodes</th></tr></thead>'
                 "<tbody>")
    parts += [_quota_row(q) for q in view.quotas]
    if not view.quotas:
        parts.append('<tr><td colspan="3" class="none">no directory has a quota</td></tr>')
    parts.append("</tbody></table></div></body></html>")
    return "".join(parts)
