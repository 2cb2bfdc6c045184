"""Real processes on loopback: fake vLLM replicas (fake_vllm.py) and `curvine-py router`."""
from __future__ import annotations

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

ROOT = pathlib.Path(__file__).resolve().parents[2]
BLOCK = 4            # tokens per block in these tests (vLLM --block-size 4)
WAIT_S = 20.0        # bound of every wait for a condition (never asserted on)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny WordLevel tokenizer: w0..w499 and a few words, whitespace-split (no download)."""
    vocab = {"[UNK]": 0, **{f"w{i}": i + 1 for i in range(500)}}
    for word in ("hello", "system", "user", "assistant", "im_start", "im_end", "<|", "|>"):
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return str(path)


class FakeReplica:
    def __init__(self, name: str, tokenizer: str, *, legacy: bool = False) -> None:
        self.name, self.tokenizer, self.legacy = name, tokenizer, legacy
        self.http_port, self.pub_port, self.replay_port = free_port(), free_port(), free_port()
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def events(self) -> str:
        return f"tcp://127.0.0.1:{self.pub_port}"

    @property
    def replay(self) -> str:
        return f"tcp://127.0.0.1:{self.replay_port}"

    def start(self) -> None:
        cmd = [sys.executable, "-m", "tests.router.fake_vllm", "--name", self.name, "--http-port", str(self.http_port),
               "--pub-port", str(self.pub_port), "--replay-port", str(self.replay_port), "--tokenizer", self.tokenizer,
               "--block-size", str(BLOCK), "--seed", "0"] + (["--legacy"] if self.legacy else [])
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"fake replica {self.name} did not start: {line!r}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def control(self, what: str, **body: Any) -> Any:
        return httpx.post(f"{self.url}/control/{what}", json=body, timeout=10).json()

    def served(self) -> list[str]:
        return list(httpx.post(f"{self.url}/control/served", json={}, timeout=10).json()["served"])


class RouterProcess:
    def __init__(self, replicas: list[FakeReplica], args: list[str]) -> None:
        self.port = free_port()
        cmd = [sys.executable, "-m", "curvine_py.cli.main", "router", "--port", str(self.port),
               "--health-interval-s", "0.2", "--block-size", str(BLOCK), "--hash-seed", "0", *args]
        for r in replicas:
            cmd += ["--replica", r.url, "--kv-events", r.events, "--kv-replay", r.replay]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONHASHSEED": "0"})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("router="), f"router did not start: {line!r}"
        self.url = line.strip().split("=", 1)[1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def metric(self, name: str, **labels: str) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name + "{") and line.split(" ")[0] != name:
                continue
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])) if "{" in line else {}
            if all(found.get(k) == v for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def complete(self, prompt: str, **extra: Any) -> httpx.Response:
        return httpx.post(f"{self.url}/v1/completions", json={"model": "tiny", "prompt": prompt, **extra}, timeout=30)

    def sync(self, replica: FakeReplica) -> None:
        """Waits until the router applied every batch the replica published so far (publishing
        empty batches: a subscriber that joined late sees one and replays what it missed)."""
        def caught_up() -> bool:
            seq = replica.control("noop")["seq"]
            return wait_seq(self, replica, seq)
        wait_for(caught_up, f"the router to follow {replica.name}'s KV events")


def wait_seq(router: RouterProcess, replica: FakeReplica, seq: int) -> bool:
    try:
        wait_for(lambda: router.metric("curvine_router_kv_last_seq", replica=replica.url) >= seq,
                 "seq", timeout=0.5)
        return True
    except AssertionError:
        return False


@pytest.fixture
def replicas(tokenizer_file: str) -> Iterator[Callable[..., FakeReplica]]:
    started: list[FakeReplica] = []

    def make(name: str, *, legacy: bool = False) -> FakeReplica:
        replica = FakeReplica(name, tokenizer_file, legacy=legacy)
        replica.start()
        started.append(replica)
        return replica
    yield make
    for replica in started:
        replica.stop()


@pytest.fixture
def router(tokenizer_file: str) -> Iterator[Callable[..., RouterProcess]]:
    started: list[RouterProcess] = []

    def make(replicas: list[FakeReplica], *args: str) -> RouterProcess:
        r = RouterProcess(replicas, ["--tokenizer", tokenizer_file, *args])
        started.append(r)
        return r
    yield make
    for r in started:
        r.stop()


def words(start: int, count: int) -> str:
    return " ".join(f"w{i}" for i in range(start, start + count))


def sse_texts(body: str) -> list[str]:
    texts = []
    for line in body.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            texts.append(json.loads(line[6:])["choices"][0]["text"])
    return texts
