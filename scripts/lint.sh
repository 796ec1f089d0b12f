#!/usr/bin/env bash
# Every static check, both languages: formatting, lint rules, types, line length. Exit 1 on any finding.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH"
ruff=.tools/venv/bin/ruff
status=0
check() { # $1: label, rest: command
  local label=$1; shift
  if "$@"; then echo "[lint] $label: ok"; else echo "[lint] $label: FAILED"; status=1; fi
}
check "prettier" prettier --check --log-level warn .
check "eslint" eslint --max-warnings 0 .
check "tsc" tsc -p tsconfig.json --noEmit
check "ruff check" "$ruff" check -q gpu-learner thinkingbox tracking
check "ruff format" "$ruff" format --check -q gpu-learner thinkingbox tracking
check "pyright gpu-learner" pyright --pythonpath "$(cat .tools/python-venv)/bin/python" -p gpu-learner/pyproject.toml \
  gpu-learner/tbt_gpu
check "pyright thinkingbox" pyright --pythonpath "$(cat .tools/thinkingbox-venv)/bin/python" \
  -p thinkingbox/pyproject.toml thinkingbox/tbt_thinkingbox
check "pyright tracking" pyright --pythonpath "$(cat .tools/tracking-venv)/bin/python" -p tracking/pyproject.toml \
  tracking/tbt_tracking tracking/tests
# Prettier leaves long strings and comments alone; the team's limit is 120 characters in every source file we write
# (dataset fixtures under examples/ and test fixtures keep the shape of the files they imitate).
long_lines() {
  git ls-files '*.ts' '*.py' '*.sh' ':!:examples/**' ':!:**/tests/fixtures/**' | xargs awk 'length > 120 {
    printf "%s:%d: %d characters\n", FILENAME, FNR, length; n++ } END { exit n > 0 }'
}
check "line length <= 120" long_lines
exit $status
