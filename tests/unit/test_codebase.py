"""Rules about the codebase itself: generated code is current (the import rules: test_dependencies.py)."""
from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_generated_protobuf_code_is_current() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"], check=False,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr

