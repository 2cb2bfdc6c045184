#!/usr/bin/env bash
# Sets up everything (apt + .venv, including the real LMCache stack) and runs the whole test suite.
# This is the README's test command and what CI (.ci/run) calls.
set -euo pipefail
cd "$(dirname "$0")/.."
CURVINE_WITH_LMCACHE=1 bash scripts/setup.sh
# Gates (issue 9): lint and strict typing of the package (generated code excluded in pyproject.toml).
.venv/bin/ruff check curvine_py tests bench scripts
.venv/bin/mypy curvine_py
export CURVINE_REQUIRE_LMCACHE=1 CURVINE_REQUIRE_NETNS=1 CURVINE_REQUIRE_POSTGRES=1 PYTHONHASHSEED=0 LMCACHE_TRACK_USAGE=false LMCACHE_DISABLE_BANNER=1
# Three test processes, a file's tests in one of them: most tests wait on real processes (leases,
# deadlines, mounts), not on the 2 CPUs, and 1,100 tests in one process take over 25 minutes.
exec .venv/bin/pytest -p no:cacheprovider -n 3 --dist loadfile tests "$@"
