"""Deployment artefacts that cannot run here (no Docker engine) are at least valid and coherent."""
from __future__ import annotations

import pathlib

import yaml

from curvine_py.cli.main import SUBCOMMANDS

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_compose_file_is_valid_and_uses_real_subcommands() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"master", "worker-1", "worker-2", "mount"} <= set(services)
    for name, service in services.items():
        command = service["command"]
        assert command[0] == "curvine-py" and command[1] in SUBCOMMANDS, name
    for name in ("worker-1", "worker-2"):
        command = services[name]["command"]
        assert command[command.index("--master") + 1] == "master:8995"
    assert (ROOT / services["master"]["build"]["dockerfile"]).exists()
