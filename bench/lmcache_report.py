"""The numbers and the docs/benchmarks.md section of `curvine-py bench lmcache` (bench/lmcache.py
measures; this module summarizes the samples and renders the table and prose)."""
from __future__ import annotations

from typing import Any

from bench import common


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """GB/s medians per backend and op, and per-repeat ratios to the raw pair."""
    nbytes = result["bytes_per_sample"]
    raw = result["raw"]
    gigabytes = nbytes / 1e9

    def cpu(samples: list[dict[str, float]], side: str) -> float | None:
        """Median CPU s/GB of a get; None where not metered (or a serving thread ended mid-sample:
        the per-thread counters of the live threads then went down)."""
        values = [s[f"get_{side}_cpu_s"] / gigabytes for s in samples]
        return common.median(values) if all(v > 0 for v in values) else None

    out: dict[str, Any] = {"raw": {**{op: common.median(common.gbps(nbytes, s[f"{op}_s"]) for s in raw)
                                      for op in ("get", "put")},
                                   "get_cpu": {"client": cpu(raw, "client"), "server": cpu(raw, "server")}}}
    for name, samples in result["backends"].items():
        entry: dict[str, Any] = {}
        for op in ("get", "put"):
            pair = common.Paired(tuple(common.gbps(nbytes, s[f"{op}_s"]) for s in samples),
                                 tuple(common.gbps(nbytes, r[f"{op}_s"]) for r in raw))
            entry[op] = {"gbps": common.median(pair.subject), "vs_raw": pair.ratio,
                         "ms": common.median(s[f"{op}_s"] * 1e3 for s in samples)}
        entry["contains_ms"] = common.median(s["contains_s"] * 1e3 for s in samples)
        entry["get_cpu"] = {"client": cpu(samples, "client"), "server": cpu(samples, "server")}
        out[name] = entry
    return out


def ratio_between(result: dict[str, Any], subject: str, baseline: str, op: str) -> float:
    """Median over repeats of subject/baseline throughput (both measured in the same repeat)."""
    a, b = result["backends"][subject], result["backends"][baseline]
    return common.median(y[f"{op}_s"] / x[f"{op}_s"] for x, y in zip(a, b, strict=True))


LABELS = {
    "native": "curvine native plugin (TCP)",
    "native_local": "curvine native plugin (same node: short-circuit)",
    "lm_curvine": "curvine worker `lm://` port",
    "fs_curvine": "`fs://` over the curvine FUSE mount",
    "lm_stock": "LMCache stock `lm://` server",
    "redis": "Redis 7 (`redis://`)",
}


def _met(targets: dict[str, Any], name: str) -> str:
    return "met" if targets[name]["met"] else "**MISSED**"


def _cpu(entry: dict[str, Any]) -> str:
    """CPU seconds per GB of a get, client process / serving process."""
    return " / ".join("n/a" if v is None else f"{v:.2f}" for v in (entry["get_cpu"]["client"],
                                                                   entry["get_cpu"]["server"]))


def _backend_table(summary: dict[str, Any], count: int) -> str:
    raw = summary["raw"]
    rows = [["raw socket pair", f"{raw['get']:.2f}", "1.00x", _cpu(raw), f"{raw['put']:.2f}", "1.00x", ""]]
    for name, label in LABELS.items():
        if name in summary:
            e = summary[name]
            rows.append([label, f"{e['get']['gbps']:.2f}", f"{e['get']['vs_raw']:.2f}x", _cpu(e),
                         f"{e['put']['gbps']:.2f}", f"{e['put']['vs_raw']:.2f}x", f"{e['contains_ms']:.2f}"])
    return common.table(["backend", "get GB/s", "get vs raw", "get CPU s/GB client / server", "put GB/s",
                         "put vs raw", f"lookup of {count} ms"], rows)


def render(payload: dict[str, Any]) -> str:
    params, loop, veth, sc = payload["parameters"], payload["loopback"], payload["veth"], payload["scenario"]
    r, t = payload["ratios"], payload["targets"]
    chunk_mib = loop["chunk_bytes"] >> 20
    lines = [
        "## LMCache: KV chunks through LMCache 0.5.6's own connectors",
        "",
        common.machine_line(payload["machine"]),
        "",
        (f"{params['count']} chunks of {chunk_mib} MiB (Llama-3-8B: 256 tokens, bf16) per sample, median of "
         f"{params['repeats']} repeats, data dirs in {params['dir']}. The client is a real LMCache "
         "`RemoteBackend` + the connector LMCache creates for the URL or plugin. Put = "
         "`batched_submit_put_task` until every completion callback, then one `contains` (lm:// PUTs have no "
         "reply); get = `batched_get_blocking` (the retrieve path, into LMCache's CPU memory objects, verified "
         "after the clock stops); lookup = `batched_contains`. Raw = one TCP connection to a separate process: "
         "`os.sendfile` of a page-cached file -> `recv_into` a page-aligned mmap (put: `sendall` -> `recv_into` "
         "an mmap + 1-byte ack), measured before and after the backends in every repeat; vs raw = median of "
         "per-repeat ratios."),
        "",
        "### Every server on loopback",
        "",
        _backend_table(loop["summary"], params["count"]),
        "",
        (f"Native plugin get over TCP = **{r['native_vs_redis_get']:.2f}x Redis** (target >= "
         f"{t['native_vs_redis_get']['target']:.0f}x: {_met(t, 'native_vs_redis_get')}) and "
         f"**{r['native_vs_stock_lm_get']:.2f}x LMCache's stock lm server** (target >= "
         f"{t['native_vs_stock_lm_get']['target']:.0f}x: {_met(t, 'native_vs_stock_lm_get')}); put = "
         f"{r['native_vs_redis_put']:.2f}x Redis, {r['native_vs_stock_lm_put']:.2f}x stock lm (medians of "
         "per-repeat ratios). On one host the plugin's default is the short-circuit row (its node name, the "
         "hostname, equals the worker's): get = "
         f"{r['native_local_vs_stock_lm_get']:.2f}x the stock lm server. On loopback the curvine worker and client and both "
         "ends of the raw pair use Reno instead of the host's default BBR (BBR paces every send, "
         "which costs loopback `sendfile` more than half its throughput); the stock server and Redis run as "
         "shipped (see docs/lmcache.md)."),
    ]
    mp = loop["mp_l2"]
    if mp:
        lines += ["", (f"Multiprocess mode, `lmcache bench l2` on the L2 adapter alone ({chunk_mib} MiB values, "
                       f"{params['count']} keys x {params['repeats']} rounds, in-flight 1): "
                       + "; ".join(f"`{name}` store {v['Store']['gbps']:.2f} GB/s, load {v['Load']['gbps']:.2f} GB/s"
                                   for name, v in mp.items())
                       + " (`native_plugin` = curvine, `resp` = LMCache's native RESP client on the same Redis).")]
    lines += [
        "",
        "### Servers in another network namespace (veth + bridge), client in the root namespace",
        "",
        _backend_table(veth["summary"], params["count"]),
        "",
        (f"Native plugin get = {r['veth_native_vs_redis_get']:.2f}x Redis, {r['veth_native_vs_stock_lm_get']:.2f}x "
         "the stock lm server across the link."),
        "",
        (f"### Reference scenario: a {params['scenario_tokens']:,}-token Qwen2-7B prompt from a worker in another "
         "network namespace"),
        "",
        (f"{params['scenario_chunks']} full chunks of {sc['chunk_bytes'] >> 20} MiB (28 layers x 4 KV heads x 128 x "
         f"bf16 x 256 tokens) = {sc['bytes_per_sample'] / 1e9:.3f} GB, retrieved with `batched_get_blocking` from a "
         "worker in namespace 0; raw = the same 7 requests to a raw server in namespace 0 over the same link; "
         f"median of {params['scenario_repeats']} repeats."),
        "",
        common.table(["path", "retrieve ms", "GB/s", "time vs raw", "CPU s/GB client / server"], [
            ["raw socket pair", f"{sc['raw_ms']:.1f}", f"{sc['summary']['raw']['get']:.2f}", "1.00x",
             _cpu(sc["summary"]["raw"])],
            ["curvine native plugin", f"**{sc['native_ms']:.1f}**", f"{sc['summary']['native']['get']['gbps']:.2f}",
             f"**{r['scenario_vs_raw_time']:.2f}x**", _cpu(sc["summary"]["native"])],
            ["curvine `lm://` port (stock client)", f"{sc['summary']['lm_curvine']['get']['ms']:.1f}",
             f"{sc['summary']['lm_curvine']['get']['gbps']:.2f}",
             f"{1 / sc['summary']['lm_curvine']['get']['vs_raw']:.2f}x", _cpu(sc["summary"]["lm_curvine"])],
            ["reference", f"{sc['reference_ms']:.2f}", f"{sc['bytes_per_sample'] / sc['reference_ms'] / 1e6:.2f}", "",
             ""],
        ]),
        "",
        (f"Target: within {t['scenario_vs_raw_time']['target']:.2f}x the raw time: "
         f"{_met(t, 'scenario_vs_raw_time')} ({r['scenario_vs_raw_time']:.2f}x)."),
    ]
    return "\n".join(lines)
