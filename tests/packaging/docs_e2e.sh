#!/usr/bin/env bash
# The generated man page and completions cover every command: the command tree is read from the
# binary's --help (CLI11's own listing, independent of the generator), then each command path
# must have its section in runnel.1 and be offered by the bash and zsh completions.
# Usage: docs_e2e.sh RUNNEL_BINARY DOCS_DIR (DOCS_DIR holds runnel.1, runnel.bash and _runnel).
set -euo pipefail
R="$1"
docs="$2"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
checks=0

# Subcommand names listed under "Subcommands:" in `runnel <path> --help`.
subcommands() {
  "$R" "$@" --help | awk '/^Subcommands:/{f=1;next} f&&/^  [a-z]/{print $1} f&&/^$/{f=0}'
}
paths=()
walk() {
  local sub
  for sub in $(subcommands "$@"); do
    paths+=("$* $sub")
    walk "$@" "$sub"
  done
}
walk
[[ ${#paths[@]} -ge 20 ]] || fail "only ${#paths[@]} command paths found in --help"
echo "docs_e2e: ${#paths[@]} command paths"

for f in runnel.1 runnel.bash _runnel; do
  [[ -s "$docs/$f" ]] || { fail "$docs/$f is missing or empty"; }
done
# The files the build wrote are what the binary prints now.
cmp -s "$docs/runnel.1" <("$R" manpage) || fail "runnel.1 differs from \`runnel manpage\`"
cmp -s "$docs/runnel.bash" <("$R" completion bash) || fail "runnel.bash differs from the binary's"
cmp -s "$docs/_runnel" <("$R" completion zsh) || fail "_runnel differs from the binary's"
# The hidden commands are not documented themselves.
grep -q 'runnel completion\|runnel manpage' <(grep '^\.SS' "$docs/runnel.1") &&
  fail "the man page lists a hidden command"

# Man page: one section per command path, and roff that groff reads without a warning.
for p in "${paths[@]}"; do
  p="${p# }"
  grep -qxF ".SS \"runnel $p\"" "$docs/runnel.1" || fail "runnel.1 has no section for 'runnel $p'"
  checks=$((checks + 1))
done
if command -v groff >/dev/null; then
  warnings="$(groff -man -Tutf8 -ww -z "$docs/runnel.1" 2>&1)"
  [[ -z "$warnings" ]] || fail "groff warns about runnel.1: $warnings"
  checks=$((checks + 1))
else
  echo "docs_e2e: WARNING: groff is not installed; runnel.1 was not rendered" >&2
fi

# bash: completing each path's last word from its prefix offers it; options complete too.
bash -n "$docs/runnel.bash" || fail "runnel.bash is not valid bash"
bash_complete() {
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1));
           _runnel; printf "%s\n" "${COMPREPLY[@]}"' _ "$docs/runnel.bash" "$@"
}
for p in "${paths[@]}"; do
  read -ra words <<<"$p"
  last="${words[-1]}"
  got="$(bash_complete runnel "${words[@]:0:${#words[@]}-1}" "${last:0:2}")"
  grep -qxF "$last" <<<"$got" || fail "bash: 'runnel ${p# }' not offered (got: $got)"
  checks=$((checks + 1))
done
got="$(bash_complete runnel serve --data /tmp --li)"
[[ "$got" == "--listen" ]] || fail "bash: 'runnel serve --data /tmp --li' gave '$got'"
got="$(bash_complete runnel group ack --url x --ten)"
[[ "$got" == "--tenant" ]] || fail "bash: 'runnel group ack --url x --ten' gave '$got'"

# zsh: the function parses, and with zsh's completion functions stubbed it offers each path.
if command -v zsh >/dev/null; then
  zsh -n "$docs/_runnel" || fail "_runnel is not valid zsh"
  zsh_complete() {
    zsh -fc '
      _describe() { local arr=${@[-1]}; print -rl -- ${(P)arr}; }
      _files() { print -r -- FILES; }
      file=$1; shift
      words=("$@"); CURRENT=${#words}; PREFIX=${words[-1]}
      source $file' _ "$docs/_runnel" "$@"
  }
  for p in "${paths[@]}"; do
    read -ra words <<<"$p"
    last="${words[-1]}"
    got="$(zsh_complete runnel "${words[@]:0:${#words[@]}-1}" "${last:0:2}")"
    grep -q "^$last:" <<<"$got" || fail "zsh: 'runnel ${p# }' not offered"
    checks=$((checks + 1))
  done
  zsh_complete runnel serve --l | grep -q '^--listen:HOST:PORT to listen on$' ||
    fail "zsh: 'runnel serve --l' does not offer --listen with its description"
else
  echo "docs_e2e: WARNING: zsh is not installed (scripts/deps.d/package.txt); _runnel only checked by the man page pass" >&2
fi

echo "docs_e2e: $checks checks, $failures failed"
[[ $failures -eq 0 ]] || exit 1
echo "$checks passed, 0 failed"
