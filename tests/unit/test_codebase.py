"""Rules about the codebase itself: generated code is current, core/ stays sans-IO."""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORBIDDEN_IN_CORE = {"trio", "grpc", "asyncio", "pyfuse3", "socket", "threading"}


def test_generated_protobuf_code_is_current() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"], check=False,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_core_imports_no_io_frameworks() -> None:
    offenders = []
    for path in (ROOT / "curvine_py" / "core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN_IN_CORE]
    assert offenders == []
