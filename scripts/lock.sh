#!/usr/bin/env bash
# Regenerates the committed locks in requirements/ on purpose: `bash scripts/lock.sh --upgrade` moves to
# newer releases, `bash scripts/lock.sh` only adds what pyproject.toml or requirements/*.in newly ask
# for; then run scripts/test.sh and commit the locks with the code they were tested with.
# pyproject.toml keeps the ranges curvine-py works with; the locks are what setup.sh installs:
#   full.txt   curvine-py with [test,bench,router] and the LMCache stack (CPU torch), the installer and build backend
#   dev.txt    curvine-py with [test,bench,router]; base.txt curvine-py alone; build.txt what builds it and pyfuse3
#              (all three take full.txt's versions: subsets of it)
#   lmcache-nodeps.txt  lmcache itself, installed without its declared (CUDA) dependencies
#   lmcache-next.txt    the next lmcache release (a pre-release), alone: scripts/test-lmcache-next.sh lays
#                       it over .venv to run tests/lmcache with it; never part of .venv
# Every line carries sha256 hashes; setup.sh installs with --require-hashes --no-deps, so nothing
# outside a lock is ever installed. torch==2.13.0+cpu is the CPU wheel this machine kind keeps in
# pip's find-links; elsewhere add PyTorch's CPU index (PIP_EXTRA_INDEX_URL) before running this.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP_TOOLS_VERSION=7.7.0
LMCACHE_VERSION=0.5.6
LMCACHE_NEXT_VERSION=0.5.7rc2

tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools/venv"
"$tools/venv/bin/pip" install -q "pip-tools==$PIP_TOOLS_VERSION"
compile() {
  "$tools/venv/bin/pip-compile" -q --generate-hashes --allow-unsafe --strip-extras --no-header \
    --no-emit-index-url --no-emit-find-links --rebuild "$@"
}
# `lock.sh --upgrade` takes the newest releases the ranges allow; without it, every version already
# locked is kept and only what is new or no longer allowed is resolved (a dependency added on purpose).
upgrade=()
[ "${1:-}" = "--upgrade" ] && upgrade=(--upgrade)
compile "${upgrade[@]}" --extra test --extra bench --extra router -o requirements/full.txt \
  pyproject.toml requirements/lmcache.in requirements/build.in
compile --extra test --extra bench --extra router -o requirements/dev.txt pyproject.toml requirements/build.in requirements/subset.in
compile -o requirements/base.txt pyproject.toml requirements/build.in requirements/subset.in
compile -o requirements/build.txt requirements/build.in requirements/subset.in

# lmcache without its dependencies: pip-compile cannot leave out a package's requirements, so the
# wheel is downloaded alone and hashed here.
"$tools/venv/bin/pip" download -q --no-deps --only-binary=:all: -d "$tools/wheel" "lmcache==$LMCACHE_VERSION"
{
  echo "# lmcache alone, installed with --no-deps after full.txt (scripts/lock.sh; its CUDA dependencies"
  echo "# are left out, the ones it needs on the CPU are in requirements/lmcache.in)."
  printf 'lmcache==%s' "$LMCACHE_VERSION"
  for whl in "$tools"/wheel/*.whl; do printf ' \\\n    --hash=sha256:%s' "$(sha256sum "$whl" | cut -d' ' -f1)"; done
  echo
} > requirements/lmcache-nodeps.txt

# The next lmcache, the same way (its own directory: one wheel per lock).
"$tools/venv/bin/pip" download -q --no-deps --only-binary=:all: -d "$tools/wheel-next" "lmcache==$LMCACHE_NEXT_VERSION"
{
  echo "# The next LMCache, alone, for scripts/test-lmcache-next.sh: installed with --no-deps into an overlay"
  echo "# directory laid over .venv (PYTHONPATH), never into .venv (scripts/lock.sh; $LMCACHE_VERSION stays the default)."
  printf 'lmcache==%s' "$LMCACHE_NEXT_VERSION"
  for whl in "$tools"/wheel-next/*.whl; do printf ' \\\n    --hash=sha256:%s' "$(sha256sum "$whl" | cut -d' ' -f1)"; done
  echo
} > requirements/lmcache-next.txt
echo "locks written: requirements/{full,dev,base,build,lmcache-nodeps,lmcache-next}.txt"
