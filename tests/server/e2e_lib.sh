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

# serve_on_free_port ARGS...: starts `$R serve --listen 127.0.0.1:0 ARGS...` (its output in
# $workdir/server.log) into $server_pid and exports RUNNEL_URL once it listens; fails the test,
# with the server's output, when it does not start.
serve_on_free_port() {
  : >"$workdir/server.log"
  "$R" serve --listen 127.0.0.1:0 "$@" >"$workdir/server.log" 2>&1 &
  server_pid=$!
  RUNNEL_URL=""
  for _ in $(seq 1 100); do
    RUNNEL_URL="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$workdir/server.log" | head -n1 || true)"
    [[ -n "$RUNNEL_URL" ]] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n "$RUNNEL_URL" ]] || { cat "$workdir/server.log" >&2; fail "the server did not start"; }
  export RUNNEL_URL
}
