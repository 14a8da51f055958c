#!/usr/bin/env bash
# The README as a newcomer walks it: extracts its ```sh blocks and runs them in order, in one
# fresh bash shell (so an `export` in one block holds in the next, as in a reader's terminal),
# against a `runnel serve` this script starts on the log store with its data in ./data of a
# scratch directory, the shell's working directory. The binary under test is on PATH as
# `runnel`.
#
# What the walk changes, and why:
# - The port: the README's `:4437` becomes the port of the server started here (RUNNEL_URL
#   points the client commands at it), so the walk never meets a server someone else runs.
# - A command whose trailing comment says `Ctrl-C` follows a stream until interrupted: it runs
#   for 2 seconds, and being stopped then is its success.
# - A block preceded by the line `<!-- walk: skip -->` (blank lines between are allowed) is not
#   run: building (`make`), benchmarks, a second server and compiling a program are not steps
#   of the walk.
#
# The walk fails when a command fails (bash -e, pipefail), when an answer printed in a block is
# an error (`{"error":` from curl, `failed: HTTP` from the CLI), or when it takes over 240 s.
# Usage: readme_walk.sh README.md RUNNEL_BINARY
set -euo pipefail

readme="$(realpath "$1")"
R="$(realpath "$2")"
source "$(dirname "$0")/../server/e2e_lib.sh"

mkdir -p "$workdir/bin" "$workdir/walk"
ln -s "$R" "$workdir/bin/runnel"
cd "$workdir/walk"
serve_on_free_port --store log --data "$workdir/walk/data" --long-poll-timeout-ms 1000
port="${RUNNEL_URL##*:}"

# The blocks, as one script: each opens with a line naming where it is in the README.
awk -v port="$port" -v q="'" '
  BEGIN {
    # A trailing comment: a "#" after blanks, with no quote after it.
    comment_re = "[ \t]+#[^" q "\"]*$"
    follows_re = "#[^" q "\"]*Ctrl-C[^" q "\"]*$"
  }
  function follow(line,   cmd, comment) {
    if (match(line, comment_re)) {
      cmd = substr(line, 1, RSTART - 1); comment = substr(line, RSTART)
    } else {
      cmd = line; comment = ""
    }
    return "timeout 2 " cmd " || [ $? -eq 124 ]" comment
  }
  /^<!-- walk: skip -->$/ { skip = 1; next }
  in_block && /^```/ { in_block = 0; next }
  in_block {
    line = $0
    gsub(/:4437/, ":" port, line)
    if (line ~ follows_re) line = follow(line)
    print line
    next
  }
  /^```sh[ \t]*$/ {
    if (skip) {
      skip = 0; skipped++
      while ((getline l) > 0 && l !~ /^```/) {}
      next
    }
    in_block = 1; blocks++
    printf "printf " q "\\n=== README line %d\\n" q "\n", NR
    next
  }
  /^[ \t]*$/ { next }
  { skip = 0 }
  END { printf "echo \"=== walked %d blocks, skipped %d\"\n", blocks, skipped }
' "$readme" >"$workdir/walk.sh"

blocks="$(grep -c '=== README line' "$workdir/walk.sh" || true)"
[[ "$blocks" -ge 5 ]] || fail "found only $blocks runnable sh blocks in $readme"

set +e
PATH="$workdir/bin:$PATH" timeout 240 bash -e -o pipefail "$workdir/walk.sh" >"$workdir/walk.log" 2>&1
rc=$?
set -e
show() { echo "--- the walk's script:" >&2; cat -n "$workdir/walk.sh" >&2; echo "--- its output:" >&2; cat "$workdir/walk.log" >&2; }
if [[ "$rc" != 0 ]]; then
  show
  fail "the README walk stopped with exit code $rc (last block above)"
fi
if grep -n -e '{"error":' -e 'failed: HTTP' "$workdir/walk.log" >&2; then
  show
  fail "a README command answered with an error"
fi
cat "$workdir/walk.log"
stop_server
echo "readme_walk: ok"
