"""Router settings: flags, TOML [router] and CURVINE_* environment layer as for every component."""
from __future__ import annotations

import pathlib

import pytest

from curvine_py.config import load
from curvine_py.core.errors import InvalidArgument
from curvine_py.router.main import config_from, parser, settings_from
from curvine_py.router.settings import RouterConfig


def test_toml_then_env_then_flags(tmp_path: pathlib.Path) -> None:
    toml = tmp_path / "router.toml"
    toml.write_text('[router]\npolicy = "prefix"\nhash_seed = "32123"\nblock_size = 32\n'
                    'replica = ["http://a:8000", "http://b:8000"]\n')
    c = load(RouterConfig, section="router", toml_path=str(toml),
             env={"CURVINE_BLOCK_SIZE": "64"}, flags={"policy": "round-robin"})
    assert (c.policy, c.hash_seed, c.block_size) == ("round-robin", "32123", 64)
    s = settings_from(c)
    assert s.replicas == ["http://a:8000", "http://b:8000"] and s.kv.seed == "32123" and s.kv.block_size == 64


def test_flags_reach_the_settings(tmp_path: pathlib.Path) -> None:
    args = parser().parse_args(["--replica", "http://a:8000", "--kv-events", "", "--hash-seed", "7",
                                "--weight-cpu", "0.75"])
    s = settings_from(config_from(args))
    assert s.replicas == ["http://a:8000"] and s.kv_events == [""]
    assert s.kv.seed == "7" and s.kv.weights["CPU"] == 0.75 and s.tokenizer is None and s.replicas_dns is None


def test_unknown_toml_key_is_refused(tmp_path: pathlib.Path) -> None:
    toml = tmp_path / "router.toml"
    toml.write_text("[router]\nweight_gpuu = 1.0\n")
    with pytest.raises(InvalidArgument, match="weight_gpuu"):
        load(RouterConfig, section="router", toml_path=str(toml), env={})


def test_chat_templates_hash_differently_and_llama3_renders_as_reference(tokenizer_file: str) -> None:
    from curvine_py.router.blockhash import block_hashes
    from curvine_py.router.prompt import PromptReader
    messages = [{"role": "system", "content": "You are terse. " * 20}, {"role": "user", "content": "Hi there"}]
    body = {"messages": messages}
    llama = PromptReader.from_file(tokenizer_file, chat_template="llama3").read("/v1/chat/completions", body)
    chatml = PromptReader.from_file(tokenizer_file, chat_template="chatml").read("/v1/chat/completions", body)
    assert llama.text == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                          + ("You are terse. " * 20).strip() + "<|eot_id|><|start_header_id|>user<|end_header_id|>"
                          "\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert llama.tokens and chatml.tokens
    assert block_hashes(llama.tokens, 4, "0") != block_hashes(chatml.tokens, 4, "0")
    with pytest.raises(ValueError, match="llama3"):
        PromptReader(None, chat_template="vicuna")
