#!/usr/bin/env bash
# kill -9 of `runnel serve --store log` during State Protocol compactions (compaction-kill.mjs).
# Usage: compaction-kill.sh RUNNEL_BINARY; RUNNEL_COMPACTION_KILLS sets the rounds (3 by default).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [[ ! -d "$here/node_modules/@durable-streams/state" ]]; then
  (cd "$here" && npm install --no-audit --no-fund >/dev/null)
fi
binary="$(realpath "$1")"
cd "$here"
exec node compaction-kill.mjs "$binary"
