#!/usr/bin/env bash
# Idempotent: makes sure /usr/bin/chromium exists for the browser check of the HTML report
# (test/report-browser.test.ts drives it through npm playwright-core, which never downloads a browser).
set -euo pipefail
chromium=/usr/bin/chromium
if [ -x "$chromium" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "[install-chromium] error: $chromium is missing and this is not root; install it with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y chromium" >&2
  exit 1
fi
echo "[install-chromium] installing Debian's chromium package"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
[ -x "$chromium" ] || { echo "[install-chromium] error: apt-get finished but $chromium is still missing" >&2; exit 1; }
echo "[install-chromium] $("$chromium" --version 2>/dev/null || echo "$chromium installed")"
