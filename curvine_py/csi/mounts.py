"""The FUSE mount processes of staged volumes: `curvine-py mount --subdir <volume dir>` started in
its own session (so it outlives the plugin: a plugin crash or restart does not take the mounts
with it), its output in a per-volume log under the state dir (never a pipe to the plugin, which
would break when the plugin goes), the token in its environment (never argv).

A process is known by its pid and its start time (/proc/PID/stat), so a pid reused after a reboot
or a crash is never mistaken for a volume's mount. Resource handling: the processes this plugin
started are reaped by it; those it adopted are reaped by init.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from curvine_py.csi.bindmounts import detach
from curvine_py.csi.cgroups import move_out
from curvine_py.csi.errors import internal
from curvine_py.csi.paths import is_own_volume_id
from curvine_py.fuse.mountpoint import is_mounted

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def process_start_time(pid: int) -> int | None:
    """The start time of a live (not zombie) process, None if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


class MountProcesses:
    def __init__(self, *, master: str, token: str, node_id: str, log_dir: str, extra_args: Sequence[str] = (),
                 command: Sequence[str] | None = None, cgroups: Sequence[str] = ()) -> None:
        self.master = master
        self.token = token
        self.node_id = node_id
        self.log_dir = log_dir
        self.extra_args = list(extra_args)
        self.command = list(command) if command else [sys.executable, "-m", "curvine_py.cli.main", "mount"]
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self.cgroups = list(cgroups)          # where a mount is moved so it outlives the plugin's cgroup
        os.makedirs(log_dir, mode=0o700, exist_ok=True)

    def log_file(self, volume_id: str) -> str:
        if not is_own_volume_id(volume_id):        # never a path: see curvine_py.csi.paths
            raise internal(f"{volume_id!r} is not a volume id of this driver")
        return os.path.join(self.log_dir, f"{volume_id}.log")

    def remove_log(self, volume_id: str) -> None:
        try:
            os.unlink(self.log_file(volume_id))
        except FileNotFoundError:
            pass

    def start(self, volume_id: str, volume_path: str, staging: str, *, read_only: bool,
              options: Sequence[str]) -> tuple[int, int]:
        """Starts the mount and returns (pid, start time) once it serves `staging`."""
        fuse_options = ["ro"] if read_only else []
        fuse_options += list(options)
        argv = [*self.command, "--master", self.master, "--subdir", volume_path, "--node", self.node_id,
                *self.extra_args, *(["-o", ",".join(fuse_options)] if fuse_options else []), staging]
        env = {**os.environ, "CURVINE_TOKEN": self.token} if self.token else dict(os.environ)
        path = self.log_file(volume_id)
        with open(path, "ab") as out:
            offset = out.tell()
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       env=env, start_new_session=True, close_fds=True)
        self._children[process.pid] = process
        try:
            move_out(process.pid, self.cgroups)
        except BaseException:
            self.stop(process.pid, process_start_time(process.pid) or 0, staging)
            raise
        ready = f"mounted={staging}".encode()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if ready in self._output(path, offset) and is_mounted(staging):
                started = process_start_time(process.pid)
                if started is not None:
                    log.info("mounted volume %s (%s) on %s: pid %d", volume_id, volume_path, staging, process.pid)
                    return process.pid, started
            if process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop(process.pid, process_start_time(process.pid) or 0, staging)
        tail = self._output(path, offset).decode(errors="replace").strip().splitlines()[-10:]
        raise internal(f"the mount of volume {volume_id} on {staging} did not start (exit code "
                       f"{process.returncode}): " + " | ".join(tail))

    @staticmethod
    def _output(path: str, offset: int) -> bytes:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read()

    def alive(self, pid: int, pid_start: int) -> bool:
        child = self._children.get(pid)
        if child is not None and child.poll() is not None:
            del self._children[pid]          # reaped: the pid is free again
            return False
        return pid > 0 and process_start_time(pid) == pid_start

    def stop(self, pid: int, pid_start: int, staging: str) -> None:
        """SIGTERM (the mount commits open files and unmounts), SIGKILL after STOP_TIMEOUT_S; the
        mountpoint is detached if the process left it behind."""
        if self.alive(pid, pid_start):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while self.alive(pid, pid_start) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.alive(pid, pid_start):
                log.warning("mount pid %d ignored SIGTERM for %.0fs: killing it", pid, STOP_TIMEOUT_S)
                os.kill(pid, signal.SIGKILL)
                while self.alive(pid, pid_start):
                    time.sleep(0.05)
        child = self._children.pop(pid, None)
        if child is not None:
            child.wait()
        detach(staging)
