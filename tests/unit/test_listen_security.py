"""Who may serve without a token: decided on the addresses a listen host resolves to, never its spelling."""
from __future__ import annotations

import subprocess
import sys

import pytest

from curvine_py import config
from curvine_py.core.errors import InvalidArgument

RESOLVED = {"127.cluster.example": ["10.20.0.7"], "localhost": ["127.0.0.1", "::1"],
            "lo-only.example": ["127.0.0.2"], "mixed.example": ["127.0.0.1", "192.0.2.1"]}


def fake_resolve(host: str) -> list[str]:
    return RESOLVED.get(host, [host] if host[:1].isdigit() or ":" in host else [])


@pytest.mark.parametrize("host", ["127.0.0.1", "127.9.9.9", "::1", "localhost", "lo-only.example", "::ffff:127.0.0.1"])
def test_loopback_hosts_serve_without_a_token(host: str) -> None:
    assert config.is_loopback(host, fake_resolve)
    config.require_secure(host, "", False, "master", fake_resolve)


@pytest.mark.parametrize("host", ["127.cluster.example", "mixed.example", "10.0.0.5", "0.0.0.0", "", "::",
                                  "nowhere.invalid"])
def test_a_host_that_is_not_only_loopback_needs_a_token(host: str) -> None:
    assert not config.is_loopback(host, fake_resolve)
    with pytest.raises(InvalidArgument, match="without --token"):
        config.require_secure(host, "", False, "master", fake_resolve)
    config.require_secure(host, "secret", False, "master", fake_resolve)   # with a token
    config.require_secure(host, "", True, "master", fake_resolve)          # or told --insecure


def test_the_real_resolver_sees_localhost_and_refuses_a_name_it_cannot_resolve() -> None:
    assert config.is_loopback("localhost") and config.is_loopback("127.0.0.1")
    assert not config.is_loopback("127.cluster.invalid")     # a name, not an address: it does not resolve


def test_a_master_asked_to_serve_open_on_a_127_prefixed_name_refuses_to_start(tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = subprocess.run([sys.executable, "-m", "curvine_py.cli.main", "master", "--data-dir", str(tmp_path),
                             "--host", "127.cluster.invalid", "--port", "0"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert "refusing to listen on 127.cluster.invalid without --token" in result.stderr
    assert not list(tmp_path.glob("*.addr"))
