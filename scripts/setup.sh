#!/usr/bin/env bash
# Installs everything curvine-py needs on a fresh Debian 12 machine (as root) into ./.venv, exactly
# as locked in requirements/ (versions and sha256 hashes; scripts/lock.sh regenerates the locks).
# Idempotent: on a set-up machine it only checks (apt packages present, .venv matches the lock).
# CURVINE_WITH_LMCACHE=1 adds the real LMCache stack (CPU torch + lmcache without its CUDA
# dependencies) used by the LMCache tests and benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(fuse3 libfuse3-dev pkg-config gcc python3-dev iproute2 nftables redis-server fio psmisc
              chromium chromium-driver    # chromium: the status page's browser tests (tests/web)
              postgresql)                 # the PostgreSQL metadata engine's tests (a throwaway cluster each)
missing=()
for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "${CURVINE_WITH_LMCACHE:-0}" = "1" ]; then
  LOCKS=(requirements/full.txt requirements/lmcache-nodeps.txt)
else
  LOCKS=(requirements/dev.txt)
fi
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv

# The editable install records where it points and which pyproject.toml it was made from.
project_stamp=$(sha256sum pyproject.toml | cut -d' ' -f1)
installed_here() {
  [ "$(cat .venv/.curvine-pyproject 2>/dev/null)" = "$project_stamp" ] &&
    .venv/bin/python -c 'import sys, curvine_py; sys.exit(curvine_py.__file__ != sys.argv[1])' \
      "$PWD/curvine_py/__init__.py" 2>/dev/null
}
if .venv/bin/python scripts/lockcheck.py "${LOCKS[@]}" 2>/dev/null && installed_here; then
  echo "setup: apt packages present, .venv matches ${LOCKS[*]}"
  exit 0
fi

pip_install() { .venv/bin/pip install -q --disable-pip-version-check --require-hashes --no-deps "$@"; }
# First what builds (pyfuse3 is published only as source), then the rest built with those alone.
pip_install -r requirements/build.txt
for lock in "${LOCKS[@]}"; do pip_install --no-build-isolation -r "$lock"; done
mapfile -t extra < <(.venv/bin/python scripts/lockcheck.py --extras)
[ ${#extra[@]} -eq 0 ] || .venv/bin/pip uninstall -q -y "${extra[@]}"
.venv/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
echo "$project_stamp" > .venv/.curvine-pyproject
.venv/bin/python scripts/lockcheck.py "${LOCKS[@]}"
echo "setup: .venv installed from ${LOCKS[*]}"
