"""A real `curvine-py csi` process on a real unix socket, and gRPC stubs to drive it.

    with Plugin(tmp_path, cluster.master_address, node=True) as plugin:
        plugin.node.NodeGetInfo(csi.NodeGetInfoRequest())

`kill()` is kill -9 (its mount processes live on, in their own sessions); `restart()` starts a
new plugin on the same socket and state dir.
"""
from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence
from typing import Any, Self

import grpc

from curvine_py.procs import RoleProcess, curvine_command, start
from curvine_py.proto.csi.v1 import csi_pb2 as csi
from curvine_py.proto.csi.v1 import csi_pb2_grpc

MOUNT = csi.VolumeCapability.MountVolume
Mode = csi.VolumeCapability.AccessMode


def capability(mode: int = Mode.SINGLE_NODE_WRITER, *, flags: Sequence[str] = (), fs_type: str = "") -> Any:
    return csi.VolumeCapability(mount=MOUNT(fs_type=fs_type, mount_flags=list(flags)),
                                access_mode=Mode(mode=mode))


def block_capability() -> Any:
    return csi.VolumeCapability(block=csi.VolumeCapability.BlockVolume(), access_mode=Mode(mode=Mode.SINGLE_NODE_WRITER))


class Plugin:
    def __init__(self, root: pathlib.Path, master: str, *, controller: bool = True, node: bool = True,
                 node_id: str = "node-a", extra: Sequence[str] = (), prefix: Sequence[str] = (),
                 token: str = "", path_root: str = "/tmp") -> None:
        self.root = pathlib.Path(root)
        self.master = master
        self.socket = self.root / "csi" / "csi.sock"
        self.state_dir = self.root / "state"
        self.roles = (["--controller"] if controller else []) + (["--node"] if node else [])
        self.node_id = node_id
        self.extra = list(extra)
        self.prefix = list(prefix)            # e.g. nsenter --net=...: the plugin (and its mounts) on another "host"
        self.token = token
        self.path_root = path_root            # staging and target paths must lie below it (--path-root)
        self.process: RoleProcess | None = None
        self.channel: grpc.Channel | None = None

    def argv(self) -> list[str]:
        token: list[str] = []
        if self.token:
            token_file = self.root / "token"
            self.root.mkdir(parents=True, exist_ok=True)
            token_file.write_text(self.token)
            token_file.chmod(0o600)
            token = ["--token-file", str(token_file)]
        return self.prefix + curvine_command("csi", "--endpoint", f"unix://{self.socket}", "--node-id", self.node_id,
                               "--master", self.master, "--state-dir", str(self.state_dir),
                               "--base-path", "/volumes", "--path-root", self.path_root, *token, *self.roles,
                               *self.extra)

    def start(self) -> Self:
        self.process = start("csi", self.argv(), ready_prefix="csi=")
        self.channel = grpc.insecure_channel(f"unix://{self.socket}")
        self.identity = csi_pb2_grpc.IdentityStub(self.channel)
        self.controller = csi_pb2_grpc.ControllerStub(self.channel)
        self.node = csi_pb2_grpc.NodeStub(self.channel)
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def log(self) -> str:
        return "\n".join(self.process.tail) if self.process else ""

    def stop(self) -> int:
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        code = self.process.stop() if self.process else 0
        self.process = None
        return code

    def kill(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        assert self.process is not None
        self.process.kill()
        self.process = None

    def restart(self) -> Self:
        self.stop()
        return self.start()


def _mountinfo() -> list[list[str]]:
    with open("/proc/self/mountinfo") as fh:
        return [line.split() for line in fh]


def mount_pids(staging: pathlib.Path) -> list[int]:
    """The `curvine-py mount` processes serving `staging`: the staging path is a bind of the volume's
    private FUSE mount point (curvine_py.csi.layout), so the processes are found by the device of
    the top mount on `staging` and the mount point on their command line."""
    info = _mountinfo()
    devices = [fields[2] for fields in info if fields[4] == str(staging)]
    if not devices:
        return []
    points = {fields[4].encode() for fields in info if fields[2] == devices[-1]}
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = pathlib.Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"mount" in argv and b"--subdir" in argv and any(a in points for a in argv if a.endswith(b"/fuse")):
                found.append(int(entry))
    return found


def code_of(call: Any, request: Any) -> grpc.StatusCode:
    """The status code a call fails with (the test fails if it succeeds)."""
    try:
        call(request)
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    raise AssertionError(f"{request.__class__.__name__} succeeded")
