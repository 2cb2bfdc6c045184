"""A channel to a list of masters that sends every call to the leader (issue 12, standby masters).

The masters' side of the contract: a master that is not the leader (a follower) answers EVERY call
with status UNAVAILABLE and the trailing metadata `curvine-leader` = "HOST:PORT" of the leader (an
empty value when it does not know one). Such an answer means the call was not executed, so any
call may be sent again, to another master.

What a call through this channel does:
- it goes to the leader remembered from earlier calls (at first: the list's first address), and
  only over a connected channel: an address whose channel is not connected gets up to
  CONNECT_WAIT_S (never more than what is left of the deadline) to connect; one that cannot (refused,
  unreachable, still connecting) is passed over, nothing was sent to it;
- a follower's answer with a hint sends it to the hinted address (taken into the set if the list
  did not name it, e.g. a leader restarted on another port); without a hint, to the next address;
- an address this call already tried is tried again only after a short backoff (BACKOFF_START_S,
  doubling to BACKOFF_MAX_S);
- all within the call's own deadline: each attempt gets what is left of it; once it is spent the
  call fails with UNAVAILABLE "no leader among masters ..." (NoLeader, a grpc.RpcError);
- any other answer is the call's answer: a reply, the master's own errors (an UNAVAILABLE carrying
  `curvine-errno` included), DEADLINE_EXCEEDED, and an UNAVAILABLE without the hint from a connected
  master: its connection was lost during the call (the leader died or was cut off after it may have
  received the call). As with a single master that call fails with Unavailable and is NOT sent again
  (master calls carry no request ids, so a create or rename could run twice); it may or may not have
  been executed. The next call looks for the leader again.
The leader found is remembered for later calls, by every thread sharing the channel.

A leader that stops answering (issue 24: SIGSTOPped, wedged, cut off) must not keep every caller
pinned to it. Master channels send gRPC keepalive pings (rpc/channel.py), so a silent leader's
connection is closed within about two seconds and the channel leaves READY. And a call that ended
with DEADLINE_EXCEEDED, or with UNAVAILABLE lost mid-call, makes its address suspect: the next call
first asks the other addresses who leads (PROBE_METHOD, a read-only call, again after a short
pause while they still name the suspect, all within PROBE_S and half what is left of its deadline)
and goes to one that answers as the leader, or that a follower names instead of the suspect. When
the others name the suspect throughout (its lease has not run out), the call goes there as before.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc

from curvine_py.config import DEFAULT_MASTER_PORT, normalize_address
from curvine_py.core.errors import InvalidArgument
from curvine_py.rpc.errors import ERRNO_METADATA

log = logging.getLogger(__name__)

LEADER_METADATA = "curvine-leader"
CONNECT_WAIT_S = 1.0                  # an unconnected address gets this long before the next is tried
BACKOFF_START_S = 0.05
BACKOFF_MAX_S = 0.5
MAX_HINTED = 8                        # addresses learnt from hints, beyond the list (each is a channel)
ROUNDS_WITHOUT_DEADLINE = 3           # a call without a timeout goes round the masters this often
CLOSE_DELAY_S = 1.0                   # see _Target.close
MIN_ATTEMPT_S = 0.02                  # after a failure, a retry with less time left would only time out
# gRPC's words for a call that failed before any connection took it: it was never sent.
_NOT_SENT = "failed to connect to all addresses"
PROBE_METHOD = "/curvine.v1.Master/GetMembership"   # read-only, answered by the leader from memory
PROBE_S = 1.0
_SUSPECT = (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)

_READY = grpc.ChannelConnectivity.READY
_SETTLED = (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE,
            grpc.ChannelConnectivity.SHUTDOWN)

if TYPE_CHECKING:
    _MultiCallable = grpc.UnaryUnaryMultiCallable[Any, Any]
else:                                 # grpc's class is not generic at run time
    _MultiCallable = grpc.UnaryUnaryMultiCallable


class NoLeader(grpc.RpcError):
    """No master answered as the leader within the call's deadline (UNAVAILABLE)."""

    def __init__(self, details: str) -> None:
        super().__init__(details)
        self._details = details

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[Any, ...]:
        return ()


def leader_hint(exc: grpc.RpcError) -> str | None:
    """The `curvine-leader` value of a follower's answer ("" = it knows no leader); None when the
    answer is not a follower's."""
    if exc.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    for item in exc.trailing_metadata() or ():
        if item.key == LEADER_METADATA:
            value = item.value
            return (value.decode(errors="replace") if isinstance(value, bytes) else str(value)).strip()
    return None


def _has_errno(exc: grpc.RpcError) -> bool:
    """The master's own error (it answered), not the transport's."""
    return any(item.key == ERRNO_METADATA for item in exc.trailing_metadata() or ())


def _not_sent(exc: grpc.RpcError) -> bool:
    """UNAVAILABLE before any connection took the call (the master's own UNAVAILABLE carries
    curvine-errno and is its answer)."""
    if exc.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    if any(item.key == ERRNO_METADATA for item in exc.trailing_metadata() or ()):
        return False
    return _NOT_SENT in (exc.details() or "")


class _Target:
    """One master address: its channel, and that channel's connectivity as gRPC last reported it."""

    def __init__(self, address: str, channel: grpc.Channel, changed: threading.Condition) -> None:
        self.address = address
        self.channel = channel
        self.state: grpc.ChannelConnectivity | None = None
        self._changed = changed
        self._calls: dict[str, _MultiCallable] = {}
        channel.subscribe(self._on_change, try_to_connect=True)   # connect now, not at the first call

    def _on_change(self, state: grpc.ChannelConnectivity) -> None:
        with self._changed:
            self.state = state
            self._changed.notify_all()

    def connect(self) -> None:
        """An idle channel (its connection closed) connects again only when asked."""
        self.channel.unsubscribe(self._on_change)
        self.channel.subscribe(self._on_change, try_to_connect=True)

    def multicallable(self, call: _LeaderCall) -> _MultiCallable:
        found = self._calls.get(call.method)
        if found is None:
            found = self.channel.unary_unary(  # type: ignore[call-arg]  # grpc's stubs lack _registered_method
                call.method, request_serializer=call.serializer, response_deserializer=call.deserializer,
                _registered_method=call.registered)
            self._calls[call.method] = found
        return found

    def probe(self) -> _MultiCallable:
        """PROBE_METHOD on this address, raw bytes in and out (an empty message is a valid request)."""
        found = self._calls.get(" probe")    # its own key: the method's typed call is cached too
        if found is None:
            found = self.channel.unary_unary(PROBE_METHOD)
            self._calls[" probe"] = found
        return found

    def close(self) -> None:
        """Unsubscribes now, closes the channel CLOSE_DELAY_S later: gRPC's thread that polls the
        connectivity for subscribers may be about to look at the channel once more (a round is up to
        0.2 s, one more when a connect was asked), and a channel closed under it makes that thread
        die with a traceback."""
        self.channel.unsubscribe(self._on_change)
        timer = threading.Timer(CLOSE_DELAY_S, self.channel.close)
        timer.daemon = True
        timer.start()


class LeaderChannel:
    """What MasterStub needs of a grpc.Channel (`unary_unary`, `close`), over a list of masters.
    `open_channel` makes the channel to one address (rpc/channel.py: options and TLS); `clock` and
    `sleep` are injected so tests drive deadlines and backoff without waiting."""

    def __init__(self, addresses: Sequence[str], open_channel: Callable[[str], grpc.Channel], *,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 connect_wait_s: float = CONNECT_WAIT_S) -> None:
        if not addresses:
            raise InvalidArgument("a leader channel needs at least one master address")
        self.addresses = tuple(addresses)
        self._open = open_channel
        self._clock = clock
        self._sleep = sleep
        self._connect_wait_s = connect_wait_s
        self._changed = threading.Condition()
        self._order: list[str] = list(self.addresses)    # the list, then hinted addresses
        self._targets = {address: _Target(address, open_channel(address), self._changed)
                         for address in self.addresses}
        self._leader = self.addresses[0]
        self._suspect = ""                # an address whose last call timed out or was cut off

    @property
    def leader(self) -> str:
        """The address the next call goes to first."""
        return self._leader

    def unary_unary(self, method: str, request_serializer: Callable[[Any], bytes] | None = None,
                    response_deserializer: Callable[[bytes], Any] | None = None,
                    _registered_method: bool = False) -> _LeaderCall:
        return _LeaderCall(self, method, request_serializer, response_deserializer, _registered_method)

    def close(self) -> None:
        with self._changed:
            targets = list(self._targets.values())
        for target in targets:
            target.close()

    # -- one call ------------------------------------------------------------------------------
    def invoke(self, call: _LeaderCall, request: Any, timeout: float | None,
               options: dict[str, Any]) -> tuple[Any, grpc.Call]:
        deadline = None if timeout is None else self._clock() + timeout
        address = self._leader
        if address == self._suspect and len(self._order) > 1:
            address = self._probe(address, deadline, options)
        tried: set[str] = set()
        backoff, rounds, failures, last = BACKOFF_START_S, 0, 0, "nothing tried"
        while True:
            if address in tried:
                # Every address heard of failed already during this call: pause, then go round again.
                rounds += 1
                if deadline is None and rounds >= ROUNDS_WITHOUT_DEADLINE:
                    raise NoLeader(self._no_leader(timeout, last))
                pause = backoff if deadline is None else min(backoff, deadline - self._clock())
                if pause > 0:
                    self._sleep(pause)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                tried.clear()
            remaining = None if deadline is None else deadline - self._clock()
            if remaining is not None and (remaining <= 0 or (failures and remaining < MIN_ATTEMPT_S)):
                raise NoLeader(self._no_leader(timeout, last))
            tried.add(address)
            target = self._target(address)
            if target is None or not self._connected(target, remaining):
                last, failures = f"{address}: not connected", failures + 1
                address = self._next(address)
                continue
            try:
                response, rpc_call = target.multicallable(call).with_call(request, timeout=remaining, **options)
            except grpc.RpcError as exc:
                hint = leader_hint(exc)
                if hint is None and not _not_sent(exc):
                    if exc.code() in _SUSPECT and not _has_errno(exc):
                        self._suspect = address   # silent or cut off: the next call asks the others first
                    raise                  # the call's own answer, or lost mid-call: see the module doc
                last, failures = f"{address}: {exc.details()}", failures + 1
                address = self._follow(address, hint)
                continue
            if address != self._leader:
                log.info("master leader is now %s (was %s)", address, self._leader)
                self._leader = address
            if self._suspect == address:
                self._suspect = ""
            return response, rpc_call

    def _probe(self, suspect: str, deadline: float | None, options: dict[str, Any]) -> str:
        """Where a call goes when the remembered leader is suspect: another address that answers
        the probe as the leader, or the one a follower names instead of the suspect. While the
        others still name the suspect (its lease has not run out yet), they are asked again after a
        short pause, within PROBE_S and half the call's deadline; then the suspect."""
        budget = PROBE_S if deadline is None else min(PROBE_S, (deadline - self._clock()) / 2)
        end = self._clock() + budget
        backoff = BACKOFF_START_S
        while True:
            found = self._probe_round(suspect, end, options)
            if found:
                return found
            pause = min(backoff, end - self._clock())
            if pause < MIN_ATTEMPT_S:
                return suspect
            self._sleep(pause)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _probe_round(self, suspect: str, end: float, options: dict[str, Any]) -> str:
        with self._changed:
            others = [address for address in self._order if address != suspect]
        for other in others:
            left = end - self._clock()
            if left < MIN_ATTEMPT_S:
                break
            target = self._target(other)
            if target is None or not self._connected(target, left):
                continue
            try:
                target.probe()(b"", timeout=max(end - self._clock(), MIN_ATTEMPT_S),
                               metadata=options.get("metadata"), credentials=options.get("credentials"))
            except grpc.RpcError as exc:
                hinted = self._hinted(other, leader_hint(exc))
                if hinted and hinted != suspect:
                    log.info("master %s is silent; %s names %s as the leader", suspect, other, hinted)
                    return hinted
                continue
            log.info("master %s is silent; %s answers as the leader", suspect, other)
            return other
        return ""

    def _no_leader(self, timeout: float | None, last: str) -> str:
        within = "" if timeout is None else f" within {timeout:g} s"
        return f"no leader among masters {','.join(self._order)}{within} (last: {last})"

    def _connected(self, target: _Target, remaining: float | None) -> bool:
        """Waits (bounded) for the target's channel to connect or to fail to."""
        with self._changed:
            state = target.state
        if state == _READY:
            return True
        if state == grpc.ChannelConnectivity.IDLE:
            target.connect()
        wait = self._connect_wait_s if remaining is None else min(self._connect_wait_s, remaining)
        with self._changed:
            self._changed.wait_for(lambda: target.state in _SETTLED, timeout=max(wait, 0.0))
            return target.state == _READY

    def _follow(self, address: str, hint: str | None) -> str:
        """Where to go after `address` answered as a follower (hint) or could not be reached."""
        return self._hinted(address, hint) or self._next(address)

    def _hinted(self, address: str, hint: str | None) -> str:
        """The address a follower's hint names, when it is one a call can go to; else ''."""
        if hint:
            try:
                hinted = normalize_address(hint, DEFAULT_MASTER_PORT, what="leader address")
            except InvalidArgument as exc:
                log.warning("master %s: %s", address, exc.message)
            else:
                if self._target(hinted) is not None:
                    return hinted
        return ""

    def _next(self, address: str) -> str:
        with self._changed:
            order = self._order
            return order[(order.index(address) + 1) % len(order)] if address in order else order[0]

    def _target(self, address: str) -> _Target | None:
        """The target of `address`; a hinted address not known yet gets a channel (at most
        MAX_HINTED of them: beyond, None)."""
        with self._changed:
            found = self._targets.get(address)
            if found is not None or len(self._order) >= len(self.addresses) + MAX_HINTED:
                if found is None:
                    log.warning("master leader hint %s ignored: %d hinted addresses already", address, MAX_HINTED)
                return found
        target = _Target(address, self._open(address), self._changed)   # outside the lock: it subscribes
        with self._changed:
            existing = self._targets.get(address)
            if existing is None:
                self._targets[address] = target
                self._order.append(address)
                return target
        target.close()                    # another thread added it meanwhile
        return existing


class _LeaderCall(_MultiCallable):
    """One RPC method over a LeaderChannel (blocking calls: `__call__` and `with_call`)."""

    def __init__(self, channel: LeaderChannel, method: str, serializer: Callable[[Any], bytes] | None,
                 deserializer: Callable[[bytes], Any] | None, registered: bool) -> None:
        self.channel = channel
        self.method = method
        self.serializer = serializer
        self.deserializer = deserializer
        self.registered = registered

    def __call__(self, request: Any, timeout: float | None = None, metadata: Any = None,
                 credentials: grpc.CallCredentials | None = None, wait_for_ready: bool | None = None,
                 compression: grpc.Compression | None = None) -> Any:
        return self.with_call(request, timeout, metadata, credentials, wait_for_ready, compression)[0]

    def with_call(self, request: Any, timeout: float | None = None, metadata: Any = None,
                  credentials: grpc.CallCredentials | None = None, wait_for_ready: bool | None = None,
                  compression: grpc.Compression | None = None) -> tuple[Any, grpc.Call]:
        options = {"metadata": metadata, "credentials": credentials, "wait_for_ready": wait_for_ready,
                   "compression": compression}
        return self.channel.invoke(self, request, timeout, options)

    def future(self, request: Any, timeout: float | None = None, metadata: Any = None,
               credentials: grpc.CallCredentials | None = None, wait_for_ready: bool | None = None,
               compression: grpc.Compression | None = None) -> Any:
        raise NotImplementedError("calls through a list of masters are blocking only (__call__, with_call)")
