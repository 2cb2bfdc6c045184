"""The router's settings: one frozen dataclass loaded through `curvine_py.config.load`, so every
flag can also come from the TOML `[router]` table (`--config FILE`) or a `CURVINE_<FIELD>`
environment variable (defaults < TOML < environment < flags).

`hash_seed` is vLLM's NONE_HASH seed: the string the replicas run with as PYTHONHASHSEED (vLLM
hashes it with sha256_cbor to start every block-hash chain). The router no longer reads
PYTHONHASHSEED itself; give the replicas' value here (default "0"), else no hit is predicted.
Empty strings and 0 mean "not set" for the optional fields (the loader has no None)."""
from __future__ import annotations

from dataclasses import dataclass

from curvine_py.config import load
from curvine_py.router.index import DEFAULT_WEIGHTS


@dataclass(frozen=True, slots=True)
class RouterConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    policy: str = "kv"
    replica: tuple[str, ...] = ()
    kv_events: tuple[str, ...] = ()
    kv_replay: tuple[str, ...] = ()
    replicas_dns: str = ""
    dns_interval_s: float = 10.0
    kv_events_port: int = 0
    kv_replay_port: int = 0
    kv_topic: str = ""
    health_interval_s: float = 5.0
    tokenizer: str = ""
    block_size: int = 16
    hash_seed: str = "0"
    chat_template: str = "chatml"
    prefix_blocks: int = 4
    prefix_chars: int = 1024
    load_factor: float = 1.25
    weight_gpu: float = DEFAULT_WEIGHTS["GPU"]
    weight_cpu: float = DEFAULT_WEIGHTS["CPU"]
    weight_storage: float = DEFAULT_WEIGHTS["STORAGE"]
    weight_l2_local: float = 0.6
    inflight_cost: int = 64
    imbalance: int = 16
    imbalance_ratio: float = 1.5
    l2_master: str = ""
    l2_token_file: str = ""
    l2_model: str = ""
    l2_chunk_size: int = 256
    l2_world_size: int = 1
    l2_kv_dtype: str = "bfloat16"
    l2_timeout_ms: float = 50.0
    log_level: str = "INFO"


def load_router_config(toml_path: str | None, flags: dict[str, object]) -> RouterConfig:
    return load(RouterConfig, section="router", toml_path=toml_path, flags=flags)
