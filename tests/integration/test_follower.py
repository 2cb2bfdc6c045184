"""master/follower.py: a standby master refuses every call UNAVAILABLE and names the leader."""
from __future__ import annotations

import grpc
import pytest

from curvine_py.master.follower import LEADER_METADATA_KEY, LeaderHint, build_follower_server
from curvine_py.proto.curvine.v1 import master_pb2 as pb
from curvine_py.proto.curvine.v1.master_pb2_grpc import MasterStub


@pytest.mark.parametrize("leader", ["10.0.0.7:8995", ""])
def test_every_method_is_refused_with_the_leader_named(leader: str) -> None:
    hint = LeaderHint()
    hint.set(leader)
    server = build_follower_server(hint.get)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = MasterStub(channel)  # type: ignore[no-untyped-call]
            for call, request in ((stub.Lookup, pb.LookupRequest(parent=1, name="x")),
                                  (stub.Create, pb.CreateRequest(parent=1, name="y")),
                                  (stub.StatFs, pb.StatFsRequest())):
                with pytest.raises(grpc.RpcError) as caught:
                    call(request, timeout=5)
                error = caught.value
                assert error.code() == grpc.StatusCode.UNAVAILABLE
                assert dict(error.trailing_metadata())[LEADER_METADATA_KEY] == leader
                expected = f"the leader is {leader}" if leader else "no leader is known yet"
                assert expected in error.details()
    finally:
        server.stop(0)
