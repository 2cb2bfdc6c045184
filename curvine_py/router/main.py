"""`curvine-py router`: an OpenAI-compatible HTTP proxy in front of N vLLM replicas, routing each
request round-robin, by prompt prefix (consistent hashing with bounded load) or by the KV cache the
replicas report (vLLM KV events, plus the curvine-py L2 with --l2-master). See docs/routing.md."""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import signal
import socket
import sys

from curvine_py.core.errors import CurvineError
from curvine_py.observe.logs import add_log_format_flag, setup_logging
from curvine_py.router.index import DEFAULT_WEIGHTS
from curvine_py.router.l2 import L2Lookup
from curvine_py.router.policies import POLICIES, KVSettings
from curvine_py.router.service import Router, RouterSettings
from curvine_py.router.settings import RouterConfig, load_router_config

log = logging.getLogger(__name__)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curvine-py router", description=__doc__)
    p.add_argument("--config", help="TOML file; its [router] table sets defaults (CURVINE_<FIELD> env too)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080; 0 picks one)")
    p.add_argument("--policy", choices=POLICIES, default="kv", help="how a replica is chosen (default kv)")
    r = p.add_argument_group("replicas")
    r.add_argument("--replica", action="append", default=[], metavar="URL",
                   help="a vLLM replica's base URL, e.g. http://10.0.0.5:8000 (repeatable)")
    r.add_argument("--kv-events", action="append", default=[], metavar="ENDPOINT",
                   help="the KV events PUB endpoint of the replica given at the same position, e.g. "
                        "tcp://10.0.0.5:5557 (vLLM --kv-events-config endpoint; repeatable, '' for none)")
    r.add_argument("--kv-replay", action="append", default=[], metavar="ENDPOINT",
                   help="the replay ROUTER endpoint of the replica at the same position, e.g. tcp://10.0.0.5:5558 "
                        "(vLLM replay_endpoint; repeatable, '' for none)")
    r.add_argument("--replicas-dns", metavar="NAME:PORT",
                   help="a Kubernetes headless Service: one replica per A record, resolved every --dns-interval-s")
    r.add_argument("--dns-interval-s", type=float, default=10.0, help="seconds between DNS lookups (default 10)")
    r.add_argument("--kv-events-port", type=int, help="with --replicas-dns: each pod's KV events port (e.g. 5557)")
    r.add_argument("--kv-replay-port", type=int, help="with --replicas-dns: each pod's replay port (e.g. 5558)")
    r.add_argument("--kv-topic", default="", help="KV events topic to subscribe to (vLLM's default is '')")
    r.add_argument("--health-interval-s", type=float, default=5.0,
                   help="seconds between replica health checks (GET /health; default 5)")
    h = p.add_argument_group("hashing (must match the replicas)")
    h.add_argument("--tokenizer", metavar="FILE", help="the model's tokenizer.json (needed by --policy kv)")
    h.add_argument("--block-size", type=int, default=16, help="vLLM's --block-size, tokens (default 16)")
    h.add_argument("--hash-seed", help="the replicas' PYTHONHASHSEED (vLLM's NONE_HASH seed string; default \"0\")")
    h.add_argument("--chat-template", choices=("chatml", "llama3", "none"), default="chatml",
                   help="how chat messages become the prompt that is hashed (default chatml; none: chat "
                        "requests predict no hit)")
    s = p.add_argument_group("policy tuning")
    s.add_argument("--prefix-blocks", type=int, default=4,
                   help="prefix policy: blocks of the prompt that pick the replica (default 4)")
    s.add_argument("--prefix-chars", type=int, default=1024,
                   help="prefix policy without a tokenizer: characters that pick the replica (default 1024)")
    s.add_argument("--load-factor", type=float, default=1.25,
                   help="prefix policy: bounded-load factor c (default 1.25)")
    for tier in ("gpu", "cpu", "storage"):
        s.add_argument(f"--weight-{tier}", type=float, default=DEFAULT_WEIGHTS[tier.upper()],
                       help=f"kv policy: credit of a prefix block in {tier.upper()} "
                            f"(default {DEFAULT_WEIGHTS[tier.upper()]})")
    s.add_argument("--weight-l2-local", type=float, default=0.6,
                   help="kv policy: credit of an L2 block held on the replica's own node (default 0.6)")
    s.add_argument("--inflight-cost", type=int, default=64,
                   help="kv policy: cost in tokens of each request in flight on a replica (default 64)")
    s.add_argument("--imbalance", type=int, default=16,
                   help="kv policy: the least loaded replica wins when the best has this many more requests "
                        "in flight (default 16) ...")
    s.add_argument("--imbalance-ratio", type=float, default=1.5,
                   help="... and more than this many times its count (default 1.5)")
    l2 = p.add_argument_group("the curvine-py L2 as the STORAGE tier (kv policy)")
    l2.add_argument("--l2-master", metavar="HOST:PORT", help="the curvine-py master; ask the L2 which prompt chunks "
                                                             "it holds (LMCache keys)")
    l2.add_argument("--l2-token-file", help="file holding the cluster's shared-secret token")
    l2.add_argument("--l2-model", help="LMCache's model name in its keys (vLLM's --model)")
    l2.add_argument("--l2-chunk-size", type=int, default=256, help="LMCache chunk_size, tokens (default 256)")
    l2.add_argument("--l2-world-size", type=int, default=1, help="the replicas' tensor-parallel size (default 1)")
    l2.add_argument("--l2-kv-dtype", default="bfloat16", help="LMCache's KV dtype in its keys (default bfloat16)")
    l2.add_argument("--l2-timeout-ms", type=float, default=50.0,
                    help="how long a request waits for the L2's answer before it counts as a miss (default 50)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    add_log_format_flag(p)
    return p


def config_from(args: argparse.Namespace) -> RouterConfig:
    flags = {name: value for name, value in vars(args).items() if name not in ("config", "log_format")}
    for name in ("replica", "kv_events", "kv_replay"):
        if flags.get(name) is not None:
            flags[name] = tuple(flags[name])
    return load_router_config(args.config, flags)


def settings_from(c: RouterConfig) -> RouterSettings:
    kv = KVSettings(block_size=c.block_size, seed=c.hash_seed,
                    weights={"GPU": c.weight_gpu, "CPU": c.weight_cpu, "STORAGE": c.weight_storage},
                    l2_local_weight=c.weight_l2_local, inflight_cost=c.inflight_cost,
                    imbalance=c.imbalance, imbalance_ratio=c.imbalance_ratio)
    return RouterSettings(host=c.host, port=c.port, policy=c.policy, replicas=list(c.replica),
                          kv_events=list(c.kv_events), kv_replay=list(c.kv_replay),
                          replicas_dns=c.replicas_dns or None, dns_interval_s=c.dns_interval_s,
                          kv_events_port=c.kv_events_port or None, kv_replay_port=c.kv_replay_port or None,
                          kv_topic=c.kv_topic, tokenizer=c.tokenizer or None, chat_template=c.chat_template,
                          prefix_blocks=c.prefix_blocks, prefix_chars=c.prefix_chars, load_factor=c.load_factor,
                          kv=kv, health_interval_s=c.health_interval_s)


def l2_from(args: RouterConfig, settings: RouterSettings) -> L2Lookup | None:
    if not args.l2_master:
        return None
    if args.policy != "kv":
        raise ValueError("--l2-master is used by --policy kv only")
    if not args.l2_model:
        raise ValueError("--l2-master needs --l2-model (the model name LMCache puts in its keys)")
    from curvine_py.config import ClientConfig, load
    from curvine_py.router.l2 import CurvineL2
    config = load(ClientConfig, section="client", flags={"master": args.l2_master, "token_file": args.l2_token_file or None})
    return CurvineL2(config, model=args.l2_model, block_size=settings.kv.block_size, seed=settings.kv.seed,
                     chunk_size=args.l2_chunk_size, world_size=args.l2_world_size, dtype=args.l2_kv_dtype,
                     timeout_s=args.l2_timeout_ms / 1000.0)


async def _serve(router: Router) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    port = await router.start()
    print(f"router=http://{router.settings.host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        await router.stop()


def main(argv: list[str]) -> int:
    cli = parser()
    cli.set_defaults(**{f.name: None for f in dataclasses.fields(RouterConfig)})   # not given: TOML/env apply
    args = cli.parse_args(argv)
    try:
        config = config_from(args)
    except (ValueError, OSError, CurvineError) as exc:
        print(f"curvine-py router: {exc}", file=sys.stderr)
        return 2
    setup_logging("router", socket.gethostname(), config.log_level, args.log_format)
    try:
        settings = settings_from(config)
        l2 = l2_from(config, settings)
        router = Router(settings, l2=l2)
    except (ValueError, FileNotFoundError) as exc:
        print(f"curvine-py router: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(router))
    finally:
        close = getattr(l2, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()
    return 0
