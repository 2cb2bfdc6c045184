"""One replica's vLLM KV events -> the KV index: a ZMQ SUB socket, and the replay socket for gaps.

Seq handling (each PUB message carries a u64 seq, +1 per batch):
- the next seq: applied;
- a gap (seq > last + 1, or the first message when history may have been missed): the missing
  batches are asked from the replay ROUTER socket (`[client_id, "", start_seq]` as the ROUTER
  sees it; a DEALER sends `["", start_seq]`), applied in order up to the end marker (seq -1, 8
  signed bytes). Replies come as `[topic, seq, payload]` (vLLM 0.33) or `[seq, payload]` (older
  vLLM, SGLang); both are read. When the replay is missing, times out or does not reach back far
  enough, the replica's part of the index is dropped (Dynamo does the same on any gap) and the
  stream is taken up from the current message: the router predicts less, never a wrong hit;
- a seq that goes back (the publisher restarted: vLLM restarts its seq at 0): the replica's part of
  the index is dropped, then the message is applied. Messages that a replay already applied
  (the SUB socket queues them meanwhile) are skipped.
Events of other attention groups than 0 are skipped (their hashes are not the prompt's blocks).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import zmq
import zmq.asyncio

from curvine_py.router import wire
from curvine_py.router.index import KVIndex
from curvine_py.router.metrics import RouterMetrics

log = logging.getLogger(__name__)


class Subscriber:
    def __init__(self, replica: str, endpoint: str, index: KVIndex, *, replay: str | None = None,
                 topic: str = "", block_size: int = 16, context: zmq.asyncio.Context | None = None,
                 metrics: RouterMetrics | None = None, replay_timeout_s: float = 2.0,
                 on_applied: Callable[[int], None] | None = None) -> None:
        self.replica, self.endpoint, self.replay_endpoint = replica, endpoint, replay
        self.index, self.topic, self.block_size = index, topic, block_size
        self.context = context or zmq.asyncio.Context.instance()
        self.metrics = metrics
        self.replay_timeout_s = replay_timeout_s
        self.on_applied = on_applied       # called with each applied seq (tests wait on it)
        self.last_seq: int | None = None
        self._replayed_from: int | None = None   # seqs in (this, last_seq] came from a replay
        self._warned_block_size = False

    # -- applying --------------------------------------------------------------------------------
    def _count(self, kind: str) -> None:
        if self.metrics is not None:
            self.metrics.events.labels(replica=self.replica, kind=kind).inc()

    def apply(self, payload: bytes) -> None:
        try:
            _, events, _ = wire.decode_batch(payload)
        except wire.WireError as exc:
            log.warning("replica %s: undecodable KV event batch skipped (%s)", self.replica, exc)
            return
        for event in events:
            if event.group_idx not in (None, 0):
                continue
            remote = event.locality == "REMOTE"
            if event.kind == "cleared":
                self.index.clear(self.replica)
            elif event.kind == "stored":
                if event.block_size and event.block_size != self.block_size and not self._warned_block_size:
                    self._warned_block_size = True
                    log.warning("replica %s publishes blocks of %d tokens, the router hashes %d (--block-size): "
                                "its hits cannot be predicted", self.replica, event.block_size, self.block_size)
                self.index.stored(self.replica, event.block_hashes, event.medium, remote)
            else:
                self.index.removed(self.replica, event.block_hashes, event.medium, remote)
            self._count(event.kind)
        if self.metrics is not None:
            self.metrics.index_blocks.set(len(self.index))

    def forget(self, why: str) -> None:
        """Drops what the replica published and starts its stream over (it restarted)."""
        self._reset(why)
        self.last_seq = None
        self._replayed_from = None

    def _reset(self, why: str) -> None:
        dropped = self.index.clear(self.replica)
        log.info("replica %s: %s; dropped its %d indexed blocks", self.replica, why, dropped)

    def _gap(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.seq_gaps.labels(replica=self.replica, outcome=outcome).inc()

    async def handle(self, seq: int, payload: bytes) -> None:
        """One live PUB message."""
        last = self.last_seq
        if last is not None and seq <= last:
            if self._replayed_from is not None and seq > self._replayed_from:
                return     # already applied from a replay
            if self.metrics is not None:
                self.metrics.publisher_restarts.labels(replica=self.replica).inc()
            self._reset(f"seq went back from {last} to {seq} (publisher restart)")
            self.last_seq, last = None, None
            if seq == 0:
                self._accept(seq, payload)
                return
        expected = 0 if last is None else last + 1
        if seq > expected:
            covered = await self._catch_up(expected, seq) if self.replay_endpoint else False
            if not covered and (last is not None or self.replay_endpoint):
                self._gap("dropped")
                self._reset(f"seq gap {expected}..{seq - 1} not replayed")
            elif covered:
                self._gap("replayed")
        if self.last_seq is None or seq > self.last_seq:
            self._accept(seq, payload)

    def _accept(self, seq: int, payload: bytes) -> None:
        self.apply(payload)
        self.last_seq = seq
        if self.metrics is not None:
            self.metrics.last_seq.labels(replica=self.replica).set(seq)
        self._replayed_from = None
        if self.on_applied is not None:
            self.on_applied(seq)

    # -- replay ------------------------------------------------------------------------------
    async def _catch_up(self, start: int, upto: int) -> bool:
        """Applies replayed batches start..upto-1; True if they all came."""
        assert self.replay_endpoint is not None
        before = self.last_seq
        socket = self.context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        try:
            socket.connect(self.replay_endpoint)
            await socket.send_multipart([b"", start.to_bytes(8, "big")])
            applied_to = start - 1
            while True:
                if not await socket.poll(int(self.replay_timeout_s * 1000)):
                    log.info("replica %s: replay from %d timed out", self.replica, start)
                    break
                frames = await socket.recv_multipart()
                if frames and frames[0] == b"":
                    frames = frames[1:]
                if len(frames) == 3:
                    frames = frames[1:]          # [topic, seq, payload]
                if len(frames) != 2:
                    log.warning("replica %s: replay reply of %d frames skipped", self.replica, len(frames))
                    continue
                seq = wire.decode_seq(frames[0])
                if seq == -1:
                    break
                if seq < start or seq >= upto or seq <= applied_to:
                    continue
                if seq != applied_to + 1 and not (before is None and applied_to == start - 1):
                    # (a first catch-up takes what the buffer still has: older history is lost,
                    # which only makes the router predict less)
                    log.info("replica %s: replay starts at %d, %d wanted", self.replica, seq, applied_to + 1)
                    break
                self.apply(frames[1])
                applied_to = seq
                self.last_seq = seq
        finally:
            socket.close()
        if applied_to == upto - 1:
            self._replayed_from = before if before is not None else -1
            return True
        return False

    # -- the loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        socket = self.context.socket(zmq.SUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.RCVHWM, 100_000)
        socket.setsockopt(zmq.SUBSCRIBE, self.topic.encode())
        socket.connect(self.endpoint)
        log.info("replica %s: KV events from %s (replay %s)", self.replica, self.endpoint, self.replay_endpoint)
        try:
            while True:
                frames = await socket.recv_multipart()
                if len(frames) != 3:
                    log.warning("replica %s: KV message of %d frames skipped", self.replica, len(frames))
                    continue
                try:
                    seq = wire.decode_seq(frames[1])
                except wire.WireError as exc:
                    log.warning("replica %s: %s", self.replica, exc)
                    continue
                await self.handle(seq, frames[2])
        except asyncio.CancelledError:
            raise
        finally:
            socket.close()
