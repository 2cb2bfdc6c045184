"""Key/name/path validation and configuration layering."""
from __future__ import annotations

import pytest

from curvine_py import config
from curvine_py.core.errors import InvalidArgument, NameTooLong
from curvine_py.core.keys import split_path, validate_key, validate_name


def test_keys() -> None:
    assert validate_key("vllm@m@1@0@abc@bfloat16") == b"vllm@m@1@0@abc@bfloat16"
    for bad in ("", "a\x00b"):
        with pytest.raises(InvalidArgument):
            validate_key(bad)
    with pytest.raises(NameTooLong):
        validate_key("k" * 1025)
    assert validate_key("k" * 2000, max_bytes=4096)


def test_names_and_paths_cannot_escape() -> None:
    assert split_path("/a/../../b/./c") == ["b", "c"]
    assert split_path("../../etc") == ["etc"]
    for bad in ("", ".", "..", "a/b", "x\x00"):
        with pytest.raises(InvalidArgument):
            validate_name(bad)
    with pytest.raises(NameTooLong):
        validate_name("n" * 256)
    validate_name("n" * 255)


def test_layering_defaults_toml_env_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    toml = tmp_path / "c.toml"
    toml.write_text('[worker]\nport = 1000\nhost = "0.0.0.0"\nhigh_watermark = 0.8\n')
    env = {"CURVINE_PORT": "2000", "CURVINE_NODE": "gpu-7"}
    loaded = config.load(config.WorkerConfig, section="worker", toml_path=str(toml), env=env,
                         flags={"port": 3000, "host": None})
    assert (loaded.port, loaded.host, loaded.node, loaded.high_watermark) == (3000, "0.0.0.0", "gpu-7", 0.8)
    toml.write_text("[worker]\nno_such_key = 1\n")
    with pytest.raises(InvalidArgument, match="no_such_key"):
        config.load(config.WorkerConfig, section="worker", toml_path=str(toml), env={})
    with pytest.raises(InvalidArgument):
        config.load(config.WorkerConfig, section="worker", env={"CURVINE_PORT": "eighty"})


def test_sizes_addresses_and_open_cluster_refusal() -> None:
    assert config.parse_size("100GiB") == 100 << 30 and config.parse_size("512MiB") == 512 << 20
    assert config.parse_data_dir("/data/nvme0:20GiB") == ("/data/nvme0", 20 << 30)
    assert config.parse_data_dir("/data/nvme0") == ("/data/nvme0", 0)
    assert config.split_address("10.0.0.1:9", 1) == ("10.0.0.1", 9)
    assert config.split_address("[::1]:9", 1) == ("::1", 9)
    with pytest.raises(InvalidArgument):
        config.parse_size("lots")
    with pytest.raises(InvalidArgument, match="token"):
        config.require_secure("10.0.0.5", "", False, "master")
    config.require_secure("10.0.0.5", "", True, "master")
    config.require_secure("127.0.0.1", "", False, "master")


def test_mount_settings_layer_defaults_toml_env_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from curvine_py.fuse.options import parse
    toml = tmp_path / "m.toml"
    toml.write_text('[mount]\nattr_timeout = 5.0\nentry_timeout = 4.0\nfuse_data_threads = 3\n'
                    'fuse_read_ahead = 1048576\n')
    env = {"CURVINE_MASTER": "m:1", "CURVINE_ENTRY_TIMEOUT": "2.5", "CURVINE_FUSE_TRIO_READS": "0",
           "CURVINE_FUSE_DATA_THREADS": "6"}
    options = parse(["/mnt/x", "--config", str(toml), "--attr-timeout", "0.25"], env=env)
    assert options.master == "m:1"                           # env stands in for --master
    assert options.attr_timeout == 0.25                      # flag over TOML
    assert options.entry_timeout == 2.5                      # env over TOML
    assert options.data_threads == 6 and options.read_ahead == 1 << 20 and not options.trio_reads
    assert options.negative_timeout == 0.0 and options.deadline_s == 10.0 and options.switch_interval > 0
    assert parse(["/m", "--master", "h:1", "-o", "attr_timeout=3"], env={}).attr_timeout == 3.0
    # Bad values are refused at load, each with its name in the message.
    for argv, env, name in (
            (["/m"], {}, "--master"),
            (["/m", "--master", "h:1"], {"CURVINE_FUSE_DATA_THREADS": "0"}, "fuse_data_threads"),
            (["/m", "--master", "h:1"], {"CURVINE_FUSE_DATA_THREADS": "many"}, "fuse_data_threads"),
            (["/m", "--master", "h:1", "--deadline", "0"], {}, "deadline_s"),
            (["/m", "--master", "h:1", "--max-tasks", "0"], {}, "max_tasks"),
            (["/m", "--master", "h:1"], {"CURVINE_FUSE_SWITCH_INTERVAL": "-1"}, "fuse_switch_interval")):
        with pytest.raises(InvalidArgument, match=name):
            parse(argv, env=env)
    relaxed = parse(["/m", "--master", "h:1", "-o", "noatime"], env={})
    assert relaxed.atime == "noatime" and "noatime" not in relaxed.libfuse_options()
    assert parse(["/m", "--master", "h:1"], env={}).atime == "relatime"
    assert parse(["/m", "--master", "h:1", "-o", "strictatime"], env={"CURVINE_ATIME": "noatime"}).atime == "strictatime"
    with pytest.raises(InvalidArgument, match="atime"):
        parse(["/m", "--master", "h:1"], env={"CURVINE_ATIME": "sometimes"})
    toml.write_text("[mount]\nattr_timout = 1\n")
    with pytest.raises(InvalidArgument, match="attr_timout"):
        parse(["/m", "--master", "h:1", "--config", str(toml)], env={})


def test_token_file_stands_for_the_token_at_its_layer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    load = config.load
    cfg = load(config.MasterConfig, section="master", flags={"token_file": str(secret)},
               env={"CURVINE_TOKEN": "from-env"})
    assert cfg.token == "from-file", "--token-file beats CURVINE_TOKEN"
    cfg = load(config.MasterConfig, section="master", flags={"token": "from-flag"},
               env={"CURVINE_TOKEN_FILE": str(secret)})
    assert cfg.token == "from-flag", "--token beats CURVINE_TOKEN_FILE"
    assert load(config.WorkerConfig, section="worker", env={"CURVINE_TOKEN_FILE": str(secret)}).token == "from-file"
    assert load(config.MountConfig, section="mount", env={"CURVINE_TOKEN": "t"}).token == "t"
    toml = tmp_path / "c.toml"
    toml.write_text(f'[client]\ntoken_file = "{secret}"\n')
    assert load(config.ClientConfig, section="client", toml_path=str(toml), env={}).token == "from-file"
    # What each bad input gets: a clear error naming the file, never showing a token.
    with pytest.raises(InvalidArgument, match="not both"):
        load(config.MasterConfig, section="master", flags={"token": "x", "token_file": str(secret)}, env={})
    for content, message in (("", "is empty"), ("  \n", "is empty"), ("a b", "whitespace"), ("top secret", "whitespace")):
        secret.write_text(content)
        with pytest.raises(InvalidArgument, match=message) as caught:
            load(config.ClientConfig, section="client", flags={"token_file": str(secret)}, env={})
        assert "secret" not in str(caught.value).replace(str(tmp_path), "")
    with pytest.raises(InvalidArgument, match="cannot read the token file"):
        load(config.ClientConfig, section="client", flags={"token_file": str(tmp_path / "missing")}, env={})


def test_tokens_are_never_in_a_repr() -> None:
    from curvine_py.fuse.options import parse
    for cfg in (config.MasterConfig(token="hush-1"), config.WorkerConfig(token="hush-1"),
                config.ClientConfig(token="hush-1"), config.MountConfig(token="hush-1"),
                parse(["/m", "--master", "h:1"], env={"CURVINE_TOKEN": "hush-1"})):
        assert cfg.token == "hush-1" and "hush-1" not in repr(cfg)
