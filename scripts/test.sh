#!/usr/bin/env bash
# Runs every test suite against real local servers (started here if needed, stopped again afterwards when
# this script started them). Prints one final line: `N passed, N failed`.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH"
started=0
if ! tsx cli/tbt.ts status >/dev/null 2>&1; then started=1; fi
tsx cli/tbt.ts up || { echo "0 passed, 1 failed (could not start the local servers)"; exit 1; }
cleanup() { [ $started = 1 ] && [ -z "${TBT_KEEP_UP:-}" ] && tsx cli/tbt.ts down >/dev/null 2>&1; }
trap cleanup EXIT

pass=0; fail=0
files=$(find test -name '*.test.ts' | sort)
[ -n "${TBT_TEST_FILTER:-}" ] && files=$(echo "$files" | grep -E "$TBT_TEST_FILTER")
if [ -n "$files" ]; then
  node --import tsx --test --test-concurrency=1 --test-reporter=spec $files 2>&1 | tee .state/node-tests.log
  p=$(grep -E '^ℹ pass [0-9]+' .state/node-tests.log | awk '{print $3}'); f=$(grep -E '^ℹ fail [0-9]+' .state/node-tests.log | awk '{print $3}')
  pass=$((pass + ${p:-0})); fail=$((fail + ${f:-1}))
fi
venv=$(cat .tools/python-venv)
if [ -z "${TBT_TEST_FILTER:-}" ] && ls gpu-learner/tests/test_*.py >/dev/null 2>&1; then
  "$venv/bin/python" -m pytest gpu-learner/tests thinkingbox/tests -q -p no:cacheprovider 2>&1 | tee .state/python-tests.log
  p=$(grep -oE '[0-9]+ passed' .state/python-tests.log | tail -1 | awk '{print $1}'); f=$(grep -oE '[0-9]+ (failed|error)' .state/python-tests.log | awk '{s+=$1} END {print s+0}')
  [ -z "$p" ] && [ "${f:-0}" = 0 ] && f=1
  pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0}))
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
