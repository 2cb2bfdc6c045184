"""A vLLM replica for the router tests, run as its own process: OpenAI HTTP (completions and chat,
streaming too, /v1/models, /health) and KV events on a ZMQ PUB socket plus the replay ROUTER
socket, in vLLM's wire format (tests/router/vllm_wire.py).

Each completion it serves "caches" its prompt: one BlockStored (GPU) batch for the prompt's full
blocks. Control endpoints (tests only): POST /control/publish {"prompt", "medium", "locality"}
publishes without serving; POST /control/gap makes the next batch skip the PUB socket (it stays in
the replay buffer, as a batch a subscriber lost); POST /control/hold {"on": bool} holds responses
(load); GET /control/served: the requests served.

    python -m tests.router.fake_vllm --name A --http-port P --pub-port Q --replay-port R --tokenizer F
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import deque
from typing import Any

import msgspec
import zmq
import zmq.asyncio
from aiohttp import web
from tokenizers import Tokenizer

from tests.router import vllm_wire

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class Fake:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tokenizer = Tokenizer.from_file(args.tokenizer)
        self.ctx = zmq.asyncio.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.bind(f"tcp://127.0.0.1:{args.pub_port}")
        self.replay = self.ctx.socket(zmq.ROUTER)
        self.replay.bind(f"tcp://127.0.0.1:{args.replay_port}")
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=10_000)
        self.seq = 0
        self.skip_next = False
        self.released = asyncio.Event()
        self.released.set()
        self.served: list[str] = []
        self.encoder = msgspec.msgpack.Encoder()
        self.topic = args.topic.encode()

    def tokens(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text).ids)

    async def publish(self, events: list[Any]) -> int:
        payload = self.encoder.encode(vllm_wire.EventBatch(ts=time.time(), events=events))
        seq = self.seq
        self.seq += 1
        self.buffer.append((seq, payload))
        if self.skip_next:
            self.skip_next = False
        else:
            await self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    async def cache(self, text: str, medium: str = "GPU", locality: str | None = None) -> int:
        tokens = self.tokens(text)
        size = self.args.block_size
        hashes = vllm_wire.vllm_block_hashes(tokens, size, self.args.seed)
        event = vllm_wire.stored(hashes, tokens[:len(hashes) * size], size, medium, legacy=self.args.legacy)
        if locality is not None and not self.args.legacy:
            event.locality = locality
        return await self.publish([event])

    async def serve_replay(self) -> None:
        while True:
            client_id, _, start = await self.replay.recv_multipart()
            first = int.from_bytes(start, "big")
            for seq, payload in list(self.buffer):
                if seq >= first:
                    await self.replay.send_multipart([client_id, b"", self.topic, seq.to_bytes(8, "big"), payload])
            await self.replay.send_multipart([client_id, b"", b"", END_SEQ, b""])

    # -- OpenAI ------------------------------------------------------------------------------
    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if request.path.endswith("/chat/completions"):
            text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in body["messages"])
            text += "<|im_start|>assistant\n"
        else:
            text = body["prompt"]
        self.served.append(text)
        await self.released.wait()
        await self.cache(text)
        words = ["hello", " from", f" {self.args.name}"]
        if body.get("stream"):
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for word in words:
                chunk = {"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": word}],
                         "replica": self.args.name}
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
                await asyncio.sleep(0.05)
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        return web.json_response({"id": "x", "object": "text_completion", "replica": self.args.name,
                                  "choices": [{"index": 0, "text": "".join(words)}],
                                  "usage": {"prompt_tokens": len(self.tokens(text))}})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": self.args.name}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def control(self, request: web.Request) -> web.Response:
        what = request.match_info["what"]
        body = await request.json() if request.can_read_body else {}
        if what == "publish":
            seq = await self.cache(body["prompt"], body.get("medium", "GPU"), body.get("locality"))
            return web.json_response({"seq": seq})
        if what == "noop":
            return web.json_response({"seq": await self.publish([])})
        if what == "gap":
            self.skip_next = True
        elif what == "hold":
            if body.get("on"):
                self.released.clear()
            else:
                self.released.set()
        elif what == "served":
            return web.json_response({"served": self.served})
        return web.json_response({"ok": True, "seq": self.seq})


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--name", required=True)
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--pub-port", type=int, required=True)
    p.add_argument("--replay-port", type=int, required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--block-size", type=int, default=4)
    p.add_argument("--seed", default="0")
    p.add_argument("--topic", default="")
    p.add_argument("--legacy", action="store_true", help="legacy positional-array events")
    fake = Fake(p.parse_args())
    app = web.Application()
    app.router.add_post("/v1/completions", fake.generate)
    app.router.add_post("/v1/chat/completions", fake.generate)
    app.router.add_get("/v1/models", fake.models)
    app.router.add_get("/health", fake.health)
    app.router.add_route("*", "/control/{what}", fake.control)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", fake.args.http_port).start()
    replay = asyncio.get_running_loop().create_task(fake.serve_replay())
    print("ready", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        replay.cancel()


if __name__ == "__main__":
    asyncio.run(main())
