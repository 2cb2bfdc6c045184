"""What a put killed midway leaves, and who removes it: `fs put` writes a hidden temporary beside
the target and renames it once every byte is in; a put killed with SIGKILL leaves the temporary
(hidden, never read as the target). The next put of that name removes it (its writer is gone),
and leaves alone the temporary of a put still running and one from another host younger than an
hour (client/puttemp.py)."""
from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import time

from curvine_py.client import puttemp
from curvine_py.client.puttemp import STALE_AFTER_S, Owner
from curvine_py.core.domain import FileType, NewNode
from curvine_py.procs import curvine_command
from tests.harness import Cluster, random_bytes, wait_until
from tests.integration.test_cli import cli


def test_a_killed_put_leaves_a_hidden_temporary_that_the_next_put_of_the_name_removes(
        cluster1: Cluster, tmp_path: pathlib.Path) -> None:
    client = cluster1.client()
    client.fs.mkdir("/leftovers")
    parent = client.fs.stat("/leftovers").ino
    fifo = tmp_path / "slow.bin"
    os.mkfifo(fifo)        # the put blocks reading it: killed while the temporary exists, for sure
    put = subprocess.Popen(curvine_command("fs", "--master", cluster1.master_address, "put", str(fifo),
                                           "/leftovers/w.bin"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    writer = os.open(fifo, os.O_WRONLY)
    try:
        os.write(writer, random_bytes(3 << 20, seed=1))

        def listed() -> list[str]:
            return [e.name for e in client.master.readdir_all(parent)]
        wait_until(lambda: any(n.startswith(".w.bin.put-") for n in listed()), 30, "the put's temporary")
        put.send_signal(signal.SIGKILL)
        put.wait(30)
    finally:
        os.close(writer)
    [left] = listed()
    killed = puttemp.temporary_of("w.bin", left)
    here = puttemp.host_tag(socket.gethostname())      # the CLI's node: the host name
    assert killed is not None and killed.owner is not None and killed.owner.host == here
    assert killed.owner.pid == put.pid
    assert not client.fs.exists("/leftovers/w.bin"), "a killed put shows nothing under the name"

    # Beside it: a put still running on this host (this process: alive), another host's (fresh),
    # and a dead writer's temporary of another name.
    me = puttemp.this_process(socket.gethostname())
    running = puttemp.temporary_name("w.bin", me)
    foreign = puttemp.temporary_name("w.bin", Owner("ffffffff", 1, 1))
    unrelated = puttemp.temporary_name("w.bin.old", Owner(here, 4_194_305, 1))   # no such pid
    for name in (running, foreign, unrelated):
        client.master.create(NewNode(parent, name, FileType.REGULAR, 0o644))

    local = tmp_path / "w.bin"
    local.write_bytes(random_bytes(2 << 20, seed=2))
    done = cli("fs", "--master", cluster1.master_address, "put", str(local), "/leftovers/w.bin")
    assert done.returncode == 0, done.stderr
    assert sorted(listed()) == sorted(["w.bin", running, foreign, unrelated])   # the killed one is gone
    with client.fs.open("/leftovers/w.bin") as f:
        assert f.read() == local.read_bytes()

    # Another host's temporary goes once it is an hour old (the clock is the caller's).
    later = time.time_ns() + int(STALE_AFTER_S * 1e9) + 10**9
    assert client.fs.remove_stale_temporaries(parent, "w.bin", here=here, now_ns=later) == [foreign]
    assert sorted(listed()) == sorted(["w.bin", running, unrelated])
