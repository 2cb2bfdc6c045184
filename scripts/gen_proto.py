#!/usr/bin/env python3
"""Compiles proto/**/*.proto into curvine_py/proto/ (the only place generated code lives).

`--check` regenerates into a temporary directory and fails when the committed code differs,
so a .proto edit without a regeneration is caught by CI (tests/unit/test_codebase.py). The
generators' version stamps are left out of the comparison: a grpcio-tools or protobuf release that
rewrites only its own version number changes nothing that runs. The stamps say which runtime the
code needs at least, and pyproject.toml's grpcio and protobuf floors must cover them (also tested).
Setup does not run this: generated code is committed, never an install step.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "curvine_py" / "proto"
PACKAGE = "curvine_py.proto"
# protoc writes imports relative to the proto root ("from curvine.v1 import x_pb2"); we make them
# absolute so the generated modules need no sys.path tricks.
_IMPORT = re.compile(r"^from ((?:curvine|csi)\.v1) import (\w+_pb2)", re.MULTILINE)
# The version stamps a generator writes: grpc's GRPC_GENERATED_VERSION, protobuf's comment line
# and the major, minor, patch and suffix arguments of its runtime version check.
_STAMPS = [
    re.compile(r"^GRPC_GENERATED_VERSION = '[^']*'$", re.MULTILINE),
    re.compile(r"^# Protobuf Python Version: \S+$", re.MULTILINE),
    re.compile(r"(ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,)\s*\d+,\s*\d+,\s*\d+,"
               r"\s*'[^']*',"),
]


def generate(out_dir: pathlib.Path) -> None:
    import grpc_tools
    from grpc_tools import protoc  # imported lazily: only needed by developers and CI

    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))
    include = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    args = ["protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={out_dir}",
            f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}", *protos]
    out_dir.mkdir(parents=True, exist_ok=True)
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for path in out_dir.rglob("*.py*"):
        text = _IMPORT.sub(lambda m: f"from {PACKAGE}.{m.group(1)} import {m.group(2)}", path.read_text())
        path.write_text(text)
    for pkg in {p.parent for p in out_dir.rglob("*_pb2.py")} | {out_dir}:
        while pkg != out_dir.parent:
            (pkg / "__init__.py").touch()
            pkg = pkg.parent


def without_stamps(text: str) -> str:
    for stamp in _STAMPS:
        text = stamp.sub(lambda m: m.group(1) if m.groups() else "", text)
    return text


def same_code(a: pathlib.Path, b: pathlib.Path) -> bool:
    return without_stamps(a.read_text()) == without_stamps(b.read_text())


def differences(a: pathlib.Path, b: pathlib.Path) -> list[str]:
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    diff = sorted(str(p) for p in files_a ^ files_b)
    diff += sorted(str(p) for p in files_a & files_b if not same_code(a / p, b / p))
    return diff


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the generated code is stale")
    args = parser.parse_args()
    if not args.check:
        generate(OUT_DIR)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = pathlib.Path(tmp) / "proto"
        fresh.mkdir()
        generate(fresh)
        stale = differences(fresh, OUT_DIR)
    if stale:
        print("generated code is stale, run scripts/gen_proto.py:", *stale, sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
