"""The committed locks (requirements/*.txt, made by scripts/lock.sh) are what installs, and they are complete.

A fresh machine must install exactly what was tested: every package pinned to one version with its
sha256 hashes, the smaller locks agreeing with full.txt, every range pyproject.toml declares met, the
venv the tests run in equal to the lock, and a new venv built from the lock's files alone (no index)
able to run curvine-py.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOCKS = ROOT / "requirements"
sys.path.insert(0, str(ROOT / "scripts"))
import gen_proto  # noqa: E402
import lockcheck  # noqa: E402

LOCK_FILES = sorted(LOCKS.glob("*.txt"))
_REQUIREMENT_START = re.compile(r"^[A-Za-z0-9]")


def entries(lock: pathlib.Path) -> list[str]:
    """One string per requirement: its line and its continuation lines, comments dropped."""
    out: list[str] = []
    for line in lock.read_text().splitlines():
        if _REQUIREMENT_START.match(line):
            out.append(line)
        elif line.strip().startswith("--hash") and out:
            out[-1] += " " + line.strip()
    return out


def test_the_locks_exist() -> None:
    assert {p.name for p in LOCK_FILES} == {"full.txt", "dev.txt", "base.txt", "build.txt", "lmcache-nodeps.txt",
                                            "lmcache-next.txt"}


@pytest.mark.parametrize("lock", LOCK_FILES, ids=lambda p: p.name)
def test_every_entry_is_one_exact_version_with_sha256_hashes(lock: pathlib.Path) -> None:
    found = entries(lock)
    assert found
    for entry in found:
        assert re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*==\S+ \\", entry), entry
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), entry


@pytest.mark.parametrize("lock", LOCK_FILES, ids=lambda p: p.name)
def test_no_lock_names_an_index_or_a_path_of_this_machine(lock: pathlib.Path) -> None:
    text = lock.read_text()
    for option in ("--index-url", "--extra-index-url", "--find-links", "-f ", "file://", "-e "):
        assert option not in text, option


@pytest.mark.parametrize("name", ["dev.txt", "base.txt", "build.txt"])
def test_smaller_locks_take_full_txts_versions(name: str) -> None:
    full = lockcheck.pins(LOCKS / "full.txt")
    subset = lockcheck.pins(LOCKS / name)
    assert subset and {n: full.get(n) for n in subset} == subset


def locked_version_of(requirement: Requirement, lock: dict[str, str]) -> str:
    name = canonicalize_name(requirement.name)
    assert name in lock, f"{requirement.name} is not in the lock"
    version = lock[name]
    assert requirement.specifier.contains(version, prereleases=True), f"{requirement}: locked {version}"
    return version


def test_the_locks_meet_every_range_pyproject_declares() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base, dev = lockcheck.pins(LOCKS / "base.txt"), lockcheck.pins(LOCKS / "dev.txt")
    for spec in project["dependencies"]:
        locked_version_of(Requirement(spec), base)
    for extra in ("test", "bench", "router"):
        for spec in project["optional-dependencies"][extra]:
            locked_version_of(Requirement(spec), dev)
    build = lockcheck.pins(LOCKS / "build.txt")
    for spec in tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]:
        locked_version_of(Requirement(spec), build)


def test_the_lmcache_lock_meets_lmcache_in() -> None:
    full = lockcheck.pins(LOCKS / "full.txt")
    for line in (LOCKS / "lmcache.in").read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if spec:
            locked_version_of(Requirement(spec), full)
    assert list(lockcheck.pins(LOCKS / "lmcache-nodeps.txt")) == ["lmcache"]
    assert list(lockcheck.pins(LOCKS / "lmcache-next.txt")) == ["lmcache"]     # laid over .venv, never in it


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_the_generated_codes_runtime_floor_is_declared_and_locked() -> None:
    """The generated modules refuse a grpcio or protobuf older than the generator that wrote them."""
    proto = ROOT / "curvine_py" / "proto"
    grpc_stamps = {m for p in proto.rglob("*_pb2_grpc.py")
                   for m in re.findall(r"^GRPC_GENERATED_VERSION = '([^']+)'", p.read_text(), re.MULTILINE)}
    pb_stamps = {m for p in proto.rglob("*_pb2.py")
                 for m in re.findall(r"^# Protobuf Python Version: (\S+)", p.read_text(), re.MULTILINE)}
    assert grpc_stamps and pb_stamps
    declared = {canonicalize_name(Requirement(s).name): Requirement(s)
                for s in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    base = lockcheck.pins(LOCKS / "base.txt")
    for package, stamps in (("grpcio", grpc_stamps), ("protobuf", pb_stamps)):
        floor = max(version_tuple(s) for s in stamps)
        [minimum] = [s.version for s in declared[package].specifier if s.operator == ">="]
        assert version_tuple(minimum) >= floor, f"pyproject says {package}>={minimum}, generated code needs {floor}"
        assert version_tuple(base[package]) >= floor


def test_a_generator_release_that_only_rewrites_its_version_stamp_is_not_stale() -> None:
    committed = (ROOT / "curvine_py" / "proto" / "curvine" / "v1" / "common_pb2.py").read_text()
    restamped = re.sub(r"(ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,)\s*\d+,\s*\d+,\s*\d+,",
                       r"\1\n    9,\n    99,\n    0,", committed)
    restamped = re.sub(r"Protobuf Python Version: \S+", "Protobuf Python Version: 9.99.0", restamped)
    assert restamped != committed
    assert gen_proto.without_stamps(restamped) == gen_proto.without_stamps(committed)
    grpc = (ROOT / "curvine_py" / "proto" / "curvine" / "v1" / "master_pb2_grpc.py").read_text()
    assert gen_proto.without_stamps(re.sub(r"GRPC_GENERATED_VERSION = '[^']+'", "GRPC_GENERATED_VERSION = '9.9.9'",
                                           grpc)) == gen_proto.without_stamps(grpc)
    # ...while a change to what runs is still caught
    changed = committed.replace("AddSerializedFile(b'", "AddSerializedFile(b'\\x00", 1)
    assert changed != committed and gen_proto.without_stamps(changed) != gen_proto.without_stamps(committed)


def test_this_venv_is_exactly_the_lock() -> None:
    """What the tests run on is what a fresh machine installs: no other version, no unlocked package."""
    with_lmcache = os.environ.get("CURVINE_REQUIRE_LMCACHE") == "1"
    locks = [LOCKS / "full.txt", LOCKS / "lmcache-nodeps.txt"] if with_lmcache else [LOCKS / "dev.txt"]
    assert lockcheck.differences(locks, lockcheck.installed()) == []


def test_a_wrong_version_and_an_unlocked_package_are_reported() -> None:
    have = dict(lockcheck.installed())
    have["grpcio"] = "0.0.1"
    have["left-pad"] = "1.0"
    problems = lockcheck.differences([LOCKS / "base.txt"], have)
    assert any(p.startswith("grpcio: locked ") and p.endswith("installed 0.0.1") for p in problems)
    assert "left-pad 1.0: installed, in no lock" in problems
    del have["trio"]
    assert any(p.startswith("trio: locked ") and p.endswith("installed nothing")
               for p in lockcheck.differences([LOCKS / "base.txt"], have))


def run(*args: str | pathlib.Path, cwd: pathlib.Path | None = None) -> str:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, check=False,
                            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert result.returncode == 0, f"{args}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.mark.timeout(900)
def test_a_new_venv_from_the_base_locks_files_alone_runs_curvine_py(tmp_path: pathlib.Path) -> None:
    """The fresh path: fetch exactly the locked files (hash-checked), then install with no index at all.

    A package missing from the lock fails `pip check`; one pulled from elsewhere fails the install
    (no index); a file whose hash differs fails the download."""
    wheels = tmp_path / "files"
    build, base = LOCKS / "build.txt", LOCKS / "base.txt"
    # --no-build-isolation: pyfuse3's source metadata is prepared with this venv's locked build tools.
    run(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes", "--no-build-isolation",
        "-d", wheels, "-r", build, "-r", base)
    run(sys.executable, "-m", "venv", tmp_path / "venv")
    pip = [tmp_path / "venv" / "bin" / "pip", "install", "-q", "--no-index", "--find-links", wheels,
           "--require-hashes", "--no-deps"]
    run(*pip, "-r", build)
    run(*pip, "--no-build-isolation", "-r", base)
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "curvine_py", source / "curvine_py", ignore=shutil.ignore_patterns("__pycache__"))
    run(tmp_path / "venv" / "bin" / "pip", "install", "-q", "--no-index", "--no-deps", "--no-build-isolation",
        source)
    run(tmp_path / "venv" / "bin" / "pip", "check")
    out = run(tmp_path / "venv" / "bin" / "python", "-c",
              "import sys; sys.path.insert(0, sys.argv[1]); import lockcheck; "
              "print(lockcheck.differences([lockcheck.LOCK_DIR / 'build.txt', lockcheck.LOCK_DIR / 'base.txt'], "
              "lockcheck.installed()))", ROOT / "scripts")
    assert out.strip() == "[]"
    assert "usage" in run(tmp_path / "venv" / "bin" / "curvine-py", "--help").lower()
