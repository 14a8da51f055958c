#!/usr/bin/env bash
# Runs the console's browser test (console.test.mjs) against RUNNEL_BINARY with the system's
# chromium. Installs the pinned puppeteer-core (package-lock.json) on first use.
# Usage: run.sh RUNNEL_BINARY
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
if [[ ! -d "$here/node_modules/puppeteer-core" ]]; then
  (cd "$here" && npm ci --no-audit --no-fund >/dev/null)
fi
cd "$here"
RUNNEL_BINARY="$1" exec node --test --test-timeout=100000 console.test.mjs
