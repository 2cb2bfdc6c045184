"""Runs xfstests (fstests) generic tests against a real mount, as the suite is run against FUSE
file systems: a throwaway cluster (tests/harness.Cluster), a mount helper so that fstests'
`mount -t fuse.curvine SOURCE DIR -o OPTS` starts `curvine-py mount`, a local.config, then
`./check TESTS`. Not part of CI: the suite is external and slow (generic/069 alone takes minutes).

xfstests is not packaged by Debian 12; build it from its git repository (kdave/xfstests mirrors
the kernel.org one) after installing its build dependencies (README: acl attr automake bc gawk
gcc libacl1-dev libaio-dev libcap-dev libgdbm-dev libgdbm-compat-dev libtool libtool-bin
liburing-dev make psmisc quota uuid-dev uuid-runtime xfsprogs xfslibs-dev sqlite3), `make`, then:

    XFSTESTS=/path/to/xfstests .venv/bin/python scripts/xfstests.py generic/001 generic/069 ...

(default: the tests issue 15 names and a few basic ones; 074, 129 and 438 alone take well over ten
minutes on a small machine). As root: it writes /sbin/mount.fuse.curvine for the run and
removes it afterwards. TEST_DEV is `curvine:/xfstests-test` and SCRATCH_DEV `curvine:/xfstests-scratch`
(the mount's default fsname, `curvine:SUBDIR`), mounted with `-o subtype=` so the type is plain
`fuse` as FSTYP=fuse expects. Prints fstests' summary (each test's output stays in
XFSTESTS/results/curvine) and the mount logs that show an unexpected error; exit code 0 when
`check` ran (whatever the results), 2 when it could not start.
"""
from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.harness import Cluster

HELPER = pathlib.Path("/sbin/mount.fuse.curvine")
DEFAULT_TESTS = ["generic/001", "generic/002", "generic/005", "generic/006", "generic/011",
                 "generic/013", "generic/014", "generic/035", "generic/069", "generic/074",
                 "generic/129", "generic/192", "generic/213", "generic/228", "generic/375",
                 "generic/426", "generic/438", "generic/444"]

# `mount.fuse.curvine SOURCE DIR [-o OPTS]` (mount(8)'s helper convention): starts the mount in
# the background and returns once DIR is mounted, as a mount helper must.
HELPER_SCRIPT = """#!/bin/bash
# Written by curvine-py's scripts/xfstests.py for one run; removed when it ends.
source="$1"; dir="$2"; shift 2; opts=""
while [ $# -gt 0 ]; do
    case "$1" in -o) opts="$2"; shift 2;; -o*) opts="${{1#-o}}"; shift;; *) shift;; esac
done
subdir="${{source#curvine:}}"
log="{logs}/mount-$(basename "$dir")-$(date +%s%N).log"
PYTHONPATH={repo} setsid {python} -m curvine_py.cli.main mount --master {master} "$dir" \\
    --subdir "$subdir" -o "subtype=${{opts:+,$opts}}" >"$log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 300); do
    if grep -q '^mounted=' "$log" 2>/dev/null; then exit 0; fi
    if ! kill -0 $pid 2>/dev/null; then cat "$log" >&2; exit 32; fi
    sleep 0.1
done
echo "mount.fuse.curvine: $dir not mounted within 30 s (log: $log)" >&2
exit 32
"""


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)     # SIGTERM (timeout(1)): unmount, remove the helper, stop the cluster


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _stop)
    suite = pathlib.Path(os.environ.get("XFSTESTS", ""))
    if not (suite / "check").exists() or not (suite / "ltp" / "fsstress").exists():
        print("set XFSTESTS to a built xfstests checkout (see this script's docstring)", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("xfstests runs as root", file=sys.stderr)
        return 2
    if HELPER.exists():
        print(f"{HELPER} exists already (another run?): not replacing it", file=sys.stderr)
        return 2
    tests = argv or DEFAULT_TESTS
    results = suite / "results" / "curvine"     # kept: each test's .full and .out.bad
    with tempfile.TemporaryDirectory(prefix="curvine-xfstests-") as tmp:
        root = pathlib.Path(tmp)
        logs = root / "logs"
        logs.mkdir()
        with Cluster(root / "cluster", workers=1) as cluster:
            client = cluster.client()
            from curvine_py.core.domain import FileType, NewNode
            from curvine_py.core.posix import ROOT_INO
            for name in ("xfstests-test", "xfstests-scratch"):
                client.master.create(NewNode(parent=ROOT_INO, name=name, type=FileType.DIRECTORY, mode=0o755))
            HELPER.write_text(HELPER_SCRIPT.format(logs=logs, repo=REPO, python=sys.executable,
                                                   master=cluster.master_address))
            HELPER.chmod(0o755)
            test_dir, scratch_dir = root / "test", root / "scratch"
            test_dir.mkdir()
            scratch_dir.mkdir()
            (suite / "local.config").write_text(
                "export FSTYP=fuse\nexport FUSE_SUBTYP=.curvine\n"
                f"export TEST_DEV=curvine:/xfstests-test\nexport TEST_DIR={test_dir}\n"
                f"export SCRATCH_DEV=curvine:/xfstests-scratch\nexport SCRATCH_MNT={scratch_dir}\n"
                f"export RESULT_BASE={results}\n")
            check = subprocess.Popen(["./check", *tests], cwd=suite, text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
            try:
                stdout, stderr = check.communicate()
            finally:
                if check.poll() is None:     # stopped early: end check and the test it runs
                    os.killpg(check.pid, signal.SIGKILL)
                    check.wait()
                for mount in (test_dir, scratch_dir):
                    if subprocess.run(["umount", str(mount)], capture_output=True, check=False).returncode:
                        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)
                HELPER.unlink(missing_ok=True)
                client.close()
        print(stdout[-20000:])
        if check.returncode not in (0, 1):
            print(stderr[-4000:], file=sys.stderr)
        errors = [str(p) for p in sorted(logs.glob("*.log")) if "unexpected error" in p.read_text()]
        if errors:
            print("mount logs with unexpected errors:", *errors, sep="\n  ")
        print(f"results: {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
