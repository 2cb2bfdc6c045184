#!/usr/bin/env bash
# Runs the LMCache tests (tests/lmcache) with the NEXT LMCache release, 0.5.7rc2, while .venv keeps
# the locked 0.5.6 (scripts/test.sh runs them with that). The wheel comes from its own hashed lock,
# requirements/lmcache-next.txt (scripts/lock.sh), installed with --no-deps into an overlay
# directory that PYTHONPATH lays over .venv: every other package (torch, LMCache's CPU dependencies)
# is the .venv's, so the two runs differ only in LMCache. The harness hands PYTHONPATH on to every
# engine, `lmcache server` and `lmcache bench` process it starts, and fails collection if the
# LMCache that imports is not the expected version (CURVINE_REQUIRE_LMCACHE=<version>).
#
#   scripts/test-lmcache-next.sh                                   # all of tests/lmcache
#   scripts/test-lmcache-next.sh tests/lmcache/test_curvine_mp.py  # pytest arguments
#
# The overlay is rebuilt when the lock changes: CURVINE_LMCACHE_NEXT_DIR (default
# /tmp/curvine-lmcache-next). Tests that need LMCache's own lm:// client or server skip, saying
# that LMCache 0.5.7 removed it. Needs .venv with the LMCache stack (CURVINE_WITH_LMCACHE=1 scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=requirements/lmcache-next.txt
DIR=${CURVINE_LMCACHE_NEXT_DIR:-/tmp/curvine-lmcache-next}
VERSION=$(sed -n 's/^lmcache==\([^ ]*\).*/\1/p' "$LOCK")
[ -n "$VERSION" ] || { echo "no lmcache== line in $LOCK" >&2; exit 2; }
[ -x .venv/bin/python ] || { echo ".venv missing: run CURVINE_WITH_LMCACHE=1 scripts/setup.sh" >&2; exit 2; }

stamp=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [ "$(cat "$DIR/.curvine-lock" 2>/dev/null)" != "$stamp" ]; then
  echo "test-lmcache-next: installing lmcache $VERSION into $DIR (from $LOCK)"
  build=$(mktemp -d "${DIR%/}.build.XXXXXX")
  trap 'rm -rf "$build"' EXIT
  .venv/bin/pip install -q --no-deps --require-hashes --only-binary=:all: --target "$build" -r "$LOCK"
  echo "$stamp" > "$build/.curvine-lock"
  rm -rf "$DIR"
  mv "$build" "$DIR"
  trap - EXIT
fi

export PYTHONPATH="$DIR${PYTHONPATH:+:$PYTHONPATH}"
found=$(.venv/bin/python -c 'import torch, lmcache._version as v; print(v.__version__)' 2>/dev/null || true)
if [ "$found" != "$VERSION" ]; then
  echo "test-lmcache-next: expected lmcache $VERSION from $DIR, got '${found:-nothing}'" >&2
  exit 1
fi
export CURVINE_REQUIRE_LMCACHE="$VERSION" PYTHONHASHSEED=0 LMCACHE_TRACK_USAGE=false LMCACHE_DISABLE_BANNER=1
[ $# -gt 0 ] || set -- tests/lmcache
exec .venv/bin/pytest -q -rs -p no:cacheprovider "$@"
