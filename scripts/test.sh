#!/usr/bin/env bash
# Runs the test tiers against real local servers (started here if needed, stopped again afterwards when this
# script started them). Tier from the first argument: unit (test/unit: pure code and workflow tests with mocked
# activities; no Postgres), integration (everything else, and the Python suites) or all (the default).
# TBT_TEST_FILTER (a regex over file paths) narrows the node files. Prints one final line: `N passed, N failed`.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH"
tier="${1:-all}"
case "$tier" in unit|integration|all) ;; *) echo "usage: scripts/test.sh [unit|integration|all]" >&2; exit 2;; esac
mkdir -p .state
# A campaign test writes 2-4 GB of learner checkpoints (removed when its file ends); say so before a full disk does.
free_gb=$(df -Pk "${TMPDIR:-/tmp}" | awk 'NR == 2 { print int($4 / 1048576) }')
[ "${free_gb:-0}" -lt 10 ] && echo "warning: ${free_gb} GB free under ${TMPDIR:-/tmp}; the tests need about 10 GB" >&2
pass=0; fail=0

run_node() { # $1: label, $2: per-test timeout (ms), rest: files. A hung test fails instead of stalling CI.
  local label=$1 timeout=$2; shift 2
  [ $# = 0 ] && return 0
  local log=".state/node-tests-$label.log"
  node --import tsx --test --test-concurrency=1 --test-timeout="$timeout" --test-reporter=spec "$@" 2>&1 | tee "$log"
  local p f
  # -a and the last count: a log another run wrote into at the same time may hold NUL bytes and two summaries.
  p=$(grep -aE '^ℹ pass [0-9]+' "$log" | tail -1 | awk '{print $3}')
  f=$(grep -aE '^ℹ fail [0-9]+' "$log" | tail -1 | awk '{print $3}')
  pass=$((pass + ${p:-0})); fail=$((fail + ${f:-1}))
}
select_files() { # $1: find expression root, $2: extra find args
  local files
  files=$(find "$@" -name '*.test.ts' -print | sort)
  [ -n "${TBT_TEST_FILTER:-}" ] && files=$(echo "$files" | grep -E "$TBT_TEST_FILTER")
  echo "$files"
}

if [ "$tier" != integration ]; then
  start=$(date +%s)
  # shellcheck disable=SC2046
  run_node unit 300000 $(select_files test/unit)
  echo "unit tier: $(( $(date +%s) - start )) s"
fi

if [ "$tier" != unit ]; then
  started=0
  if ! tsx cli/tbt.ts status >/dev/null 2>&1; then started=1; fi
  tsx cli/tbt.ts up || { echo "$pass passed, $((fail + 1)) failed (could not start the local servers)"; exit 1; }
  cleanup() { [ $started = 1 ] && [ -z "${TBT_KEEP_UP:-}" ] && tsx cli/tbt.ts down >/dev/null 2>&1; }
  trap cleanup EXIT
  # shellcheck disable=SC2046
  run_node integration 1800000 $(select_files test -path test/unit -prune -o)
  venv=$(cat .tools/python-venv)
  if [ -z "${TBT_TEST_FILTER:-}" ]; then
    "$venv/bin/python" -m pytest gpu-learner/tests thinkingbox/tests -q -p no:cacheprovider \
      -o tmp_path_retention_policy=failed 2>&1 |
      tee .state/python-tests.log
    p=$(grep -oE '[0-9]+ passed' .state/python-tests.log | tail -1 | awk '{print $1}')
    f=$(grep -oE '[0-9]+ (failed|error)' .state/python-tests.log | awk '{s+=$1} END {print s+0}')
    [ -z "$p" ] && [ "${f:-0}" = 0 ] && f=1
    pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0}))
    # The tracking package lives in its own venv (mlflow, wandb) without pytest: the standard library runner.
    (cd tracking && "$(cat ../.tools/tracking-venv)/bin/python" -m unittest discover -s tests -t . 2>&1) |
      tee .state/tracking-tests.log
    ran=$(grep -oE '^Ran [0-9]+ test' .state/tracking-tests.log | awk '{print $2}')
    bad=$(grep -oE '(failures|errors)=[0-9]+' .state/tracking-tests.log | awk -F= '{s+=$2} END {print s+0}')
    if grep -qE '^OK' .state/tracking-tests.log; then pass=$((pass + ${ran:-0})); else fail=$((fail + ${bad:-1})); fi
  fi
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
