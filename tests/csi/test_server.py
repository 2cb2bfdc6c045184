"""The plugin's socket handling and log sanitizing, and the CLI's refusals (no cluster needed)."""
from __future__ import annotations

import pathlib
import socket
import subprocess

import pytest

from curvine_py.core.errors import InvalidArgument, NotPermitted
from curvine_py.csi.server import REDACTED, remove_stale_socket, sanitize, socket_path
from curvine_py.procs import curvine_command
from curvine_py.proto.csi.v1 import csi_pb2 as csi


def test_endpoints() -> None:
    assert socket_path("unix:///var/lib/kubelet/plugins/csi.curvine.io/csi.sock") == \
        "/var/lib/kubelet/plugins/csi.curvine.io/csi.sock"
    assert socket_path("unix://csi/csi.sock") == "/csi/csi.sock"
    assert socket_path("/run/csi.sock") == "/run/csi.sock"
    for bad in ("tcp://127.0.0.1:10000", "csi.sock", ""):
        with pytest.raises(InvalidArgument):
            socket_path(bad)


def test_a_stale_socket_is_removed_a_live_one_or_a_file_is_not(tmp_path: pathlib.Path) -> None:
    stale = tmp_path / "stale.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(stale))
    dead.close()                         # the file stays, nobody listens: what a killed plugin leaves
    remove_stale_socket(str(stale))
    assert not stale.exists()
    remove_stale_socket(str(tmp_path / "missing.sock"))     # nothing there: nothing to do
    live = tmp_path / "live.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(live))
    server.listen()
    try:
        with pytest.raises(NotPermitted, match="another process"):
            remove_stale_socket(str(live))
        assert live.exists()
    finally:
        server.close()
    regular = tmp_path / "file"
    regular.write_text("precious")
    with pytest.raises(NotPermitted, match="not a socket"):
        remove_stale_socket(str(regular))
    assert regular.read_text() == "precious"


def test_sanitize_strips_every_secret_field_and_keeps_the_rest() -> None:
    request = csi.NodeStageVolumeRequest(volume_id="v1", staging_target_path="/s", secrets={"token": "s3cr3t"},
                                         volume_context={"path": "/volumes/v1"})
    text = sanitize(request)
    assert "s3cr3t" not in text and REDACTED in text and "/volumes/v1" in text and '"v1"' in text
    assert request.secrets["token"] == "s3cr3t"          # the request itself is untouched
    for message in (csi.CreateVolumeRequest(name="n", secrets={"a": "xyzzy"}),
                    csi.DeleteVolumeRequest(volume_id="v", secrets={"a": "xyzzy"}),
                    csi.ControllerExpandVolumeRequest(volume_id="v", secrets={"a": "xyzzy"}),
                    csi.NodePublishVolumeRequest(volume_id="v", secrets={"a": "xyzzy"}),
                    csi.NodeExpandVolumeRequest(volume_id="v", secrets={"a": "xyzzy"}),
                    csi.ValidateVolumeCapabilitiesRequest(volume_id="v", secrets={"a": "xyzzy"})):
        assert "xyzzy" not in sanitize(message), type(message).__name__


@pytest.mark.parametrize("args, message", [
    (["--node-id", "n", "--master", "m:1", "--node"], "--endpoint"),
    (["--endpoint", "unix:///tmp/x.sock", "--master", "m:1", "--node"], "--node-id"),
    (["--endpoint", "unix:///tmp/x.sock", "--node-id", "n", "--node"], "--master"),
    (["--endpoint", "unix:///tmp/x.sock", "--node-id", "n", "--master", "m:1"], "at least one"),
    (["--endpoint", "unix:///tmp/x.sock", "--node-id", "n", "--master", "m:1", "--node", "--token-file",
      "/nonexistent/token"], "--token-file"),
])
def test_the_cli_refuses_incomplete_flags(args: list[str], message: str) -> None:
    result = subprocess.run(curvine_command("csi", *args), check=False, capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(pathlib.Path(__file__).parents[2])})
    assert result.returncode == 2 and message in result.stderr


def test_an_unusable_state_dir_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    result = subprocess.run(curvine_command("csi", "--endpoint", f"unix://{tmp_path}/csi.sock", "--node-id", "n",
                                            "--master", "127.0.0.1:1", "--node", "--state-dir", str(blocker / "x")),
                            check=False, capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(pathlib.Path(__file__).parents[2])})
    assert result.returncode == 1 and "Not a directory" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "csi.sock").exists()


def test_csi_never_imports_pyfuse3() -> None:
    code = ("import sys; from curvine_py.csi import driver, node, main; "
            "assert 'pyfuse3' not in sys.modules and 'trio' not in sys.modules, sorted(sys.modules)")
    subprocess.run(curvine_command()[:1] + ["-c", code], check=True, timeout=60,
                   env={"PYTHONPATH": str(pathlib.Path(__file__).parents[2])})
