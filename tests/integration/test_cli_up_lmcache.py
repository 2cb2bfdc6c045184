"""Each of the three LMCache configs `curvine-py up` writes works with the real LMCache 0.5.6: one
engine process stores through it and a fresh one (its local CPU tier off, so every hit is remote)
looks up and retrieves bit-exactly, as the LMCache tests in tests/lmcache/ do. On LMCache >= 0.5.7
(no lm://) `up` writes no lm:// example and prints the native_plugin adapter instead."""
from __future__ import annotations

import json
import pathlib
import signal

import pytest
import yaml

from curvine_py.lmcache import adapters, compat
from curvine_py.procs import curvine_command, start
from tests.lmcache.curvine_lab import TOKENS, assert_full_hit, entries
from tests.lmcache.harness import require_lmcache, store_and_retrieve

require_lmcache()


@pytest.mark.parametrize("way", ["fs", "lm", "plugin"])
def test_up_lmcache_config_stores_and_retrieves(tmp_path: pathlib.Path, way: str) -> None:
    data_dir = tmp_path / "cv"
    up = start("up", curvine_command("up", "--data-dir", str(data_dir), "--master-port", "0",
                                     "--worker-port", "0", "--lm-port", "0"),
               ready_prefix="lmcache examples:", timeout=90)
    try:
        if way == "lm" and not compat.has_lm_protocol():
            assert not (data_dir / "lmcache-lm.yaml").exists()
            master = (data_dir / "master.addr").read_text().strip()
            native = json.loads((data_dir / "lmcache-native.json").read_text())
            assert native == adapters.native_plugin(master)
            return
        config = yaml.safe_load((data_dir / f"lmcache-{way}.yaml").read_text())
        config["max_local_cpu_size"] = 0.5   # GB of local CPU buffer: the test box's memory, not a server's
        writer, reader = store_and_retrieve(config, tokens=TOKENS)
        assert entries(writer, "lookup")[0]["hit_tokens"] == TOKENS
        assert entries(reader, "miss")[0]["hit_tokens"] == 0        # tokens nobody stored: a miss
        assert entries(reader, "lookup")[0]["hit_tokens"] == TOKENS
        assert_full_hit(entries(reader, "retrieve")[0])
        if way == "fs":   # the chunks are files in the directory up made with the cache policy
            assert any(p.name.endswith(".data") for p in (data_dir / "mnt" / "lmcache").iterdir())
    finally:
        up.process.send_signal(signal.SIGINT)
        assert up.process.wait(30) == 0
