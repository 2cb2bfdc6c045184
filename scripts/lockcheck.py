#!/usr/bin/env python3
"""Compares the packages installed in this interpreter with the committed locks (requirements/*.txt).

`lockcheck.py LOCK...` exits 0 when every package the named locks pin is installed at exactly its
locked version and nothing is installed that no lock names (curvine-py itself aside); otherwise it
prints each difference and exits 1. `--extras` prints only the names of installed packages no lock
names, one a line (setup.sh removes them). Standard library only: it runs before anything is installed.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOCK_DIR = ROOT / "requirements"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)
SELF = "curvine-py"


def canonical(name: str) -> str:
    """PEP 503 normalisation: `PyYAML`, `pyyaml` and `py_yaml` name one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: pathlib.Path) -> dict[str, str]:
    """name -> exact version of every package a lock file pins."""
    return {canonical(m.group(1)): m.group(2) for m in _PIN.finditer(lock.read_text())}


def installed() -> dict[str, str]:
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[canonical(name)] = dist.version
    return found


def all_locked() -> set[str]:
    return {name for lock in LOCK_DIR.glob("*.txt") for name in pins(lock)}


def differences(locks: list[pathlib.Path], have: dict[str, str]) -> list[str]:
    wanted: dict[str, str] = {}
    for lock in locks:
        wanted.update(pins(lock))
    problems = [f"{name}: locked {version}, installed {have.get(name, 'nothing')}"
                for name, version in sorted(wanted.items()) if have.get(name) != version]
    problems += [f"{name} {have[name]}: installed, in no lock" for name in extras(have)]
    return problems


def extras(have: dict[str, str]) -> list[str]:
    known = all_locked() | {SELF}
    return sorted(name for name in have if name not in known)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("locks", nargs="*", type=pathlib.Path, help="lock files that must be satisfied")
    parser.add_argument("--extras", action="store_true", help="print installed packages no lock names")
    args = parser.parse_args()
    have = installed()
    if args.extras:
        for name in extras(have):
            print(name)
        return 0
    problems = differences(args.locks, have)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
