"""Request paths as LMCache's sagemaker-hyperpod client builds them, and bad ones."""

from __future__ import annotations

import urllib.parse

import pytest

from curvine_py.hyperpod.routes import (
    AcquireLease,
    BadPath,
    PutObject,
    ReleaseLease,
    parse,
)

KEY = "meta-llama/Llama-3.1-8B@00000000@0@ab12@salt"


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def test_client_paths_parse_to_routes() -> None:
    assert parse("PUT", f"/v1/kv/lmcache/{_q(KEY)}") == PutObject("lmcache", KEY)
    lease = parse("POST", f"/v1/kv/lmcache/{_q(KEY)}/leases?timeout_ms=1000&ttl_s=30.0")
    assert lease == AcquireLease("lmcache", KEY)
    assert parse("POST", "/v1/leases/abc-1/release") == ReleaseLease("abc-1")


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("PUT", "/v1/kv/%2E%2E/k"),
        ("PUT", "/v1/kv/b/.."),
        ("PUT", "/v1/kv/a%2Fb/k"),
        ("PUT", "/v1/kv/b/a%2F..%2Fb"),
        ("PUT", "/v1/kv/b/%2Fabs"),
        ("PUT", "/v1/kv/b/a%00b"),
        ("PUT", "/v1/kv/b/"),
        ("PUT", "/v1/kv/b/a/b"),
        ("PUT", "/v1/kv/b/%FF"),
        ("GET", "/v1/kv/b/k"),
        ("POST", "/v1/leases//release"),
        ("POST", "/v2/kv/b/k/leases"),
        ("PUT", "/v1/kv/b/" + "k" * 1025),
    ],
)
def test_bad_paths_are_refused(method: str, target: str) -> None:
    with pytest.raises(BadPath):
        parse(method, target)
