"""`curvine-py router` in front of fake vLLM replicas: real HTTP, real ZMQ, vLLM's wire format."""
from __future__ import annotations

import concurrent.futures
from collections.abc import Callable

import httpx

from tests.router.conftest import FakeReplica, RouterProcess, sse_texts, wait_for, words


def test_kv_policy_routes_to_the_replica_holding_the_prefix(replicas: Callable[..., FakeReplica],
                                                             router: Callable[..., RouterProcess]) -> None:
    a, b, c = replicas("A"), replicas("B", legacy=True), replicas("C")
    r = router([a, b, c], "--policy", "kv")
    for replica in (a, b, c):
        r.sync(replica)
    prompt = words(0, 32)
    b.control("publish", prompt=prompt)          # B (legacy arrays) has the prefix on its GPU
    r.sync(b)
    reply = r.complete(prompt + " w400")
    assert reply.status_code == 200 and reply.json()["replica"] == "B"
    assert reply.headers["X-Curvine-Route"] == "kv/kv" and reply.headers["X-Curvine-Predicted-Hit-Tokens"] == "32"
    c.control("publish", prompt=words(100, 16), medium="CPU")
    r.sync(c)
    stream = httpx.post(f"{r.url}/v1/chat/completions", timeout=30, json={
        "model": "tiny", "stream": True, "messages": [{"role": "user", "content": words(200, 12)}]})
    assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
    served_by = stream.headers["X-Curvine-Replica"]
    assert sse_texts(stream.text) == ["hello", " from", f" {dict((x.url, x.name) for x in (a, b, c))[served_by]}"]
    assert stream.text.endswith("data: [DONE]\n\n")
    # the replica that served the chat now has it cached (its events say so): the next turn follows it
    holder = next(x for x in (a, b, c) if x.url == served_by)
    r.sync(holder)
    again = httpx.post(f"{r.url}/v1/chat/completions", timeout=30, json={
        "model": "tiny", "messages": [{"role": "user", "content": words(200, 12)}]})
    assert again.headers["X-Curvine-Replica"] == served_by and again.headers["X-Curvine-Route"] == "kv/kv"
    assert r.complete(words(100, 16)).json()["replica"] == "C"    # the CPU tier counts too
    assert httpx.get(f"{r.url}/v1/models", timeout=10).json()["data"][0]["id"] == "tiny"
    health = httpx.get(f"{r.url}/health", timeout=10).json()
    assert health["status"] == "ok" and len(health["replicas"]) == 3
    # B's kv-routed requests: the first prompt, and the chat's second turn if B served the chat
    assert r.metric("curvine_router_requests_total", replica=b.url, policy="kv", reason="kv") == \
        1 + (served_by == b.url)
    assert r.metric("curvine_router_predicted_hit_tokens_total", policy="kv", tier="CPU") == 16
    assert r.complete("").status_code == 200
    assert httpx.post(f"{r.url}/v1/completions", content=b"{", timeout=10).status_code == 400


def test_imbalance_guard_falls_back_to_the_least_loaded(replicas: Callable[..., FakeReplica],
                                                        router: Callable[..., RouterProcess]) -> None:
    a, b = replicas("A"), replicas("B")
    r = router([a, b], "--policy", "kv", "--imbalance", "1", "--imbalance-ratio", "1.0", "--inflight-cost", "0")
    r.sync(a)
    r.sync(b)
    prompt = words(0, 40)
    a.control("publish", prompt=prompt)
    r.sync(a)
    a.control("hold", on=True)                   # A answers nothing: its requests stay in flight
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        held = [pool.submit(r.complete, prompt) for _ in range(2)]
        wait_for(lambda: len(a.served()) == 2, "two requests in flight on A")
        third = r.complete(prompt)              # A is 2 above B: B takes it despite the prefix
        assert third.json()["replica"] == "B" and third.headers["X-Curvine-Route"] == "kv/imbalance"
        a.control("hold", on=False)
        assert [f.result().json()["replica"] for f in held] == ["A", "A"]


def test_seq_gap_is_replayed_and_a_restart_is_survived(replicas: Callable[..., FakeReplica],
                                                       router: Callable[..., RouterProcess]) -> None:
    a, b = replicas("A"), replicas("B")
    r = router([a, b], "--policy", "kv")
    r.sync(a)
    r.sync(b)
    gap_prompt = words(0, 24)
    b.control("gap")                             # the next batch never reaches the PUB socket ...
    b.control("publish", prompt=gap_prompt)
    r.sync(b)                                    # ... the next one shows the gap: replayed
    assert r.metric("curvine_router_kv_seq_gaps_total", replica=b.url, outcome="replayed") == 1
    assert r.complete(gap_prompt).json()["replica"] == "B"

    # B restarts (vLLM restarts its seq at 0 and its GPU cache is empty): the old prefix is gone
    b.stop()
    wait_for(lambda: not httpx.get(f"{r.url}/health", timeout=10).json()["replicas"][1]["healthy"],
             "the router to see B down")
    assert r.complete(gap_prompt).json()["replica"] == "A"    # never sent to a replica that is down
    b.start()
    wait_for(lambda: all(x["healthy"] for x in httpx.get(f"{r.url}/health", timeout=10).json()["replicas"]),
             "the router to see B back")
    r.sync(b)
    new_prompt = words(300, 24)
    b.control("publish", prompt=new_prompt)
    r.sync(b)
    assert r.complete(new_prompt).json()["replica"] == "B"
    reply = r.complete(words(0, 24) + " w499")
    assert reply.headers["X-Curvine-Replica"] == a.url         # A served the old prompt meanwhile


def test_publisher_restart_without_a_health_failure(replicas: Callable[..., FakeReplica],
                                                    router: Callable[..., RouterProcess]) -> None:
    """The seq goes back: the replica's index is dropped, the new stream taken up."""
    a, b = replicas("A"), replicas("B")
    r = router([a, b], "--policy", "kv", "--health-interval-s", "3600")
    r.sync(a)
    r.sync(b)
    old = words(0, 24)
    b.control("publish", prompt=old)
    for _ in range(3):
        b.control("noop")
    r.sync(b)
    b.stop()
    b.start()                                    # same ports, seq from 0 again

    def restart_seen() -> bool:
        b.control("noop")
        return r.metric("curvine_router_kv_publisher_restarts_total", replica=b.url) >= 1
    wait_for(restart_seen, "the router to see B's seq go back")
    r.sync(b)
    assert r.complete(old).headers["X-Curvine-Route"] == "kv/least-loaded"


def test_round_robin_and_prefix_policies(replicas: Callable[..., FakeReplica],
                                         router: Callable[..., RouterProcess]) -> None:
    a, b = replicas("A"), replicas("B")
    rr = router([a, b], "--policy", "round-robin")
    assert sorted(rr.complete(words(0, 8)).json()["replica"] for _ in range(4)) == ["A", "A", "B", "B"]
    prefix = router([a, b], "--policy", "prefix", "--prefix-blocks", "2")
    first = prefix.complete(words(0, 8) + " w50").json()["replica"]
    assert all(prefix.complete(words(0, 8) + f" w{60 + i}").json()["replica"] == first for i in range(4))
