# Shared by the end-to-end scripts (source it after `set -euo pipefail`): a scratch directory
# $workdir removed on exit, the server started into $server_pid stopped on exit (stop_server stops
# it earlier, and fails if it crashed), and the assertions every script uses.
workdir="$(mktemp -d)"
server_pid=""
# Stops the server; fails the test if it is no longer running (it crashed).
stop_server() {
  kill -TERM "$server_pid" || fail "the server (pid $server_pid) exited before it was stopped"
  wait "$server_pid" || true
  server_pid=""
}
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
expect_eq() { [[ "$1" == "$2" ]] || fail "$3: expected [$2], got [$1]"; }
expect_has() { [[ "$1" == *"$2"* ]] || fail "$3: expected to contain [$2], got [$1]"; }
expect_lacks() { [[ "$1" != *"$2"* ]] || fail "$3: expected not to contain [$2], got [$1]"; }
