#!/usr/bin/env bash
# Installs everything curvine-py needs on a fresh Debian 12 machine (as root) into ./.venv.
# Idempotent: a second run only checks. Set CURVINE_WITH_LMCACHE=1 to add the real LMCache stack
# (CPU torch + lmcache 0.5.6 without its CUDA dependencies) used by the LMCache tests and benchmarks.
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

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e '.[test,bench]'

if [ "${CURVINE_WITH_LMCACHE:-0}" = "1" ]; then
  .venv/bin/pip install -q torch==2.13.0
  .venv/bin/pip install -q --no-deps lmcache==0.5.6
  .venv/bin/pip install -q -r scripts/lmcache-requirements.txt
fi
.venv/bin/python scripts/gen_proto.py --check
