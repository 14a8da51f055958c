#!/usr/bin/env bash
# The Debian package: built with CPack from this build tree (or taken from RUNNEL_DEB), unpacked
# with dpkg-deb -x into a scratch root, and checked file by file: the binary runs, the unit has
# its hardening keys and passes `systemd-analyze verify`, the man page, completions, headers,
# CMake package and pkg-config file are where Debian looks for them, and the server starts from
# the unit's own environment.
# Usage: package_e2e.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
workdir="$(mktemp -d)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT
failures=0
checks=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
check() {  # check DESCRIPTION COMMAND...
  local what="$1"
  shift
  checks=$((checks + 1))
  "$@" >/dev/null 2>&1 || fail "$what"
}

deb="${RUNNEL_DEB:-}"
if [[ -z "$deb" ]]; then
  (cd "$workdir" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$workdir/cpack" \
    >"$workdir/cpack.log" 2>&1) || { cat "$workdir/cpack.log" >&2; echo "FAIL: cpack" >&2; exit 1; }
  deb="$(ls "$workdir"/cpack/runnel_*.deb)"
fi
echo "package_e2e: $(basename "$deb"), $(stat -c %s "$deb") bytes"

# Control fields: the name, and dependencies as dpkg-shlibdeps found them.
info="$(dpkg-deb -f "$deb" Package Version Depends)"
check "Package: runnel" grep -qx 'Package: runnel' <<<"$info"
for lib in libc6 libssl3 libpq5 libstdc++6; do
  check "Depends names $lib" grep -q "Depends:.*\b$lib\b" <<<"$info"
done
check "conffiles lists /etc/default/runnel" \
  bash -c 'dpkg-deb --ctrl-tarfile "$1" | tar -xOf - ./conffiles | grep -qx /etc/default/runnel' _ "$deb"
check "postinst creates the runnel user" \
  bash -c 'dpkg-deb --ctrl-tarfile "$1" | tar -xOf - ./postinst | grep -q "systemd-sysusers runnel.conf"' _ "$deb"

root="$workdir/root"
mkdir -p "$root"
dpkg-deb -x "$deb" "$root"
for f in usr/bin/runnel usr/include/runnel/registry.h usr/include/runnel/status.h \
  usr/lib/librunnel.a usr/lib/cmake/runnel/runnelConfig.cmake \
  usr/lib/cmake/runnel/runnelTargets.cmake usr/lib/pkgconfig/runnel.pc \
  usr/share/man/man1/runnel.1 usr/share/bash-completion/completions/runnel \
  usr/share/zsh/vendor-completions/_runnel usr/lib/systemd/system/runnel.service \
  usr/lib/sysusers.d/runnel.conf etc/default/runnel; do
  check "the package holds /$f" test -s "$root/$f"
done
R="$root/usr/bin/runnel"
check "/usr/bin/runnel is executable" test -x "$R"
check "runnel version prints the version" bash -c '"$1" version | grep -qx "runnel [0-9.]*"' _ "$R"
check "runnel --help lists serve" bash -c '"$1" --help | grep -q "^  serve "' _ "$R"
check "the binary is stripped" bash -c '! readelf -S "$1" | grep -q "\.debug_info"' _ "$R"
check "the man page is the binary's" cmp -s "$root/usr/share/man/man1/runnel.1" <("$R" manpage)
check "the bash completion is the binary's" \
  cmp -s "$root/usr/share/bash-completion/completions/runnel" <("$R" completion bash)
check "the sysusers entry names the runnel user" grep -q '^u runnel ' "$root/usr/lib/sysusers.d/runnel.conf"

# pkg-config finds the headers and library inside the scratch root (its prefix is relative).
if command -v pkg-config >/dev/null; then
  flags="$(PKG_CONFIG_PATH="$root/usr/lib/pkgconfig" pkg-config --cflags --libs runnel)"
  check "pkg-config's include dir holds runnel/registry.h" \
    test -f "$(sed -n 's/.*-I\([^ ]*\).*/\1/p' <<<"$flags")/runnel/registry.h"
  check "pkg-config links -lrunnel" grep -q -- '-lrunnel' <<<"$flags"
fi

# The unit: every key the service relies on, with its value.
unit="$root/usr/lib/systemd/system/runnel.service"
for key in 'User=runnel' 'StateDirectory=runnel' 'WorkingDirectory=/var/lib/runnel' \
  'Environment=RUNNEL_LISTEN=127.0.0.1:4437 RUNNEL_DATA=/var/lib/runnel' \
  'EnvironmentFile=-/etc/default/runnel' 'ExecStart=/usr/bin/runnel serve $RUNNEL_OPTS' \
  'Restart=on-failure' 'LimitNOFILE=65536' 'NoNewPrivileges=yes' 'ProtectSystem=strict' \
  'ProtectHome=yes' 'PrivateTmp=yes' 'PrivateDevices=yes' 'CapabilityBoundingSet=' \
  'WantedBy=multi-user.target'; do
  check "runnel.service has $key" grep -qxF "$key" "$unit"
done
# systemd-analyze checks the unit as systemd would load it; the ExecStart binary and the man
# page it names are looked up on this machine, so they point into the scratch root.
if command -v systemd-analyze >/dev/null; then
  mkdir -p "$workdir/unit"
  sed "s|^ExecStart=/usr/bin/runnel|ExecStart=$R|" "$unit" >"$workdir/unit/runnel.service"
  # It exits 0 on a key it ignores ("Failed to parse ..., ignoring"): any output is a failure.
  if ! out="$(MANPATH="$root/usr/share/man" systemd-analyze verify "$workdir/unit/runnel.service" 2>&1)" ||
    [[ -n "$out" ]]; then
    fail "systemd-analyze verify: $out"
  fi
  checks=$((checks + 1))
  # The exposure score (0 safest, 10 unprotected): the hardening keys must keep it low.
  exposure="$(systemd-analyze security --offline=yes "$workdir/unit/runnel.service" 2>&1 |
    sed -n 's/.*Overall exposure level for runnel.service: \([0-9.]*\).*/\1/p')"
  echo "package_e2e: systemd-analyze security exposure $exposure"
  check "exposure $exposure is at most 2.5" awk -v e="$exposure" 'BEGIN { exit !(e != "" && e <= 2.5) }'
else
  echo "package_e2e: ############################################################" >&2
  echo "package_e2e: WARNING: systemd-analyze is NOT available here: the unit was NOT" >&2
  echo "package_e2e: verified by systemd, only by its keys above (scripts/deps.d/package.txt" >&2
  echo "package_e2e: lists the systemd package)." >&2
  echo "package_e2e: ############################################################" >&2
fi

# The unit's environment is all a server needs: RUNNEL_LISTEN and RUNNEL_DATA (here a free
# port and a scratch directory), nothing on the command line.
env -i PATH=/usr/bin:/bin RUNNEL_LISTEN=127.0.0.1:0 RUNNEL_DATA="$workdir/data" \
  "$R" serve >"$workdir/server.log" 2>&1 &
server_pid=$!
url=""
for _ in $(seq 1 100); do
  url="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$workdir/server.log" | head -n1 || true)"
  [[ -n "$url" ]] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -n "$url" ]]; then
  checks=$((checks + 1))
  check "the packaged server answers /healthz" curl -fsS --max-time 5 "$url/healthz"
  check "the packaged server keeps its data in RUNNEL_DATA" test -d "$workdir/data"
else
  fail "the packaged server did not start: $(cat "$workdir/server.log")"
fi

echo "package_e2e: $checks checks, $failures failed"
[[ $failures -eq 0 ]] || exit 1
echo "$checks passed, 0 failed"
