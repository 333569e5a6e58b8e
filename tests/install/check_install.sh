#!/bin/sh
# check_install.sh - what `cmake --install` puts where, staged with DESTDIR
# in a temporary directory (nothing is installed on the host).
#
#   check_install.sh layout BUILD SOURCE BINDIR LIBEXECDIR LANGDIR CONFDIR UNITDIR
#       every program, helper, manifest, the example configuration and both
#       units in their place; no installed file holds the source or build
#       directory's path (grep -a: binaries included); the programs'
#       compiled-in defaults and the units name the installed paths.
#   check_install.sh units  (same arguments)
#       systemd-analyze verify on the installed units, seen at their real
#       paths in a private mount namespace (the staged prefix bound over
#       the real one; the host is not changed), must print nothing; the
#       hardening moat-gateway(8) and moat-backend(8) promise is in them, and
#       `systemd-analyze security --offline=true` scores them (printed;
#       the same pages record them).  Exit 77 (skipped)
#       when systemd-analyze or a private mount namespace is not available.
set -eu
mode=$1 build=$2 src=$3 bindir=$4 libexecdir=$5 langdir=$6 confdir=$7 unitdir=$8

fail() {
    echo "check_install: $*" >&2
    exit 1
}
skip() {
    echo "check_install: skipped: $*"
    exit 77
}

work=$(mktemp -d /tmp/moat-install-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
stage=$work/root
DESTDIR=$stage cmake --install "$build" >"$work/install.log" 2>&1 || {
    cat "$work/install.log" >&2
    fail "cmake --install failed"
}

check_layout() {
    for f in "$bindir/moat-gateway" "$bindir/moat-backend" "$bindir/moatctl" "$bindir/moat-audit" \
        "$libexecdir/moat-audit-writer" "$libexecdir/moat-callback-sender"; do
        [ -f "$stage$f" ] && [ -x "$stage$f" ] || fail "$f is not installed as an executable"
    done
    [ -f "$stage$confdir/gateway.conf.example" ] || fail "$confdir/gateway.conf.example is not installed"
    [ ! -e "$stage$confdir/gateway.conf" ] || fail "$confdir/gateway.conf is installed: it must never replace an admin's"
    for u in moat-gateway moat-backend; do
        [ -f "$stage$unitdir/$u.service" ] || fail "$unitdir/$u.service is not installed"
    done
    # the manifests: exactly the checkout's
    (cd "$src/backend/languages" && find . -type f | sort) >"$work/want"
    (cd "$stage$langdir" && find . -type f | sort) >"$work/got"
    cmp -s "$work/want" "$work/got" || fail "$langdir holds other files than backend/languages: $(diff "$work/want" "$work/got" | tr '\n' ' ')"

    # no build machine's path anywhere (as given, and with symlinks resolved)
    for d in "$src" "$build" "$(cd -P "$src" && pwd)" "$(cd -P "$build" && pwd)"; do
        found=$(grep -rlaF -e "$d" "$stage" || true)
        [ -z "$found" ] || fail "installed files hold the path $d: $(echo "$found" | sed "s|^$stage||" | tr '\n' ' ')"
    done

    # the defaults name the installed places
    "$stage$bindir/moat-backend" --help | grep -qF "(default $langdir)" || fail "moat-backend's default -L is not $langdir"
    for h in moat-audit-writer moat-callback-sender; do
        grep -qaF "$libexecdir/$h" "$stage$bindir/moat-gateway" || fail "moat-gateway's default $h is not $libexecdir/$h"
    done
    grep -qxF "ExecStart=$bindir/moat-gateway -c $confdir/gateway.conf" "$stage$unitdir/moat-gateway.service" ||
        fail "moat-gateway.service does not start $bindir/moat-gateway -c $confdir/gateway.conf"
    grep -q "^ExecStart=$bindir/moat-backend " "$stage$unitdir/moat-backend.service" ||
        fail "moat-backend.service does not start $bindir/moat-backend"
    echo "check_install: layout OK ($(find "$stage" -type f | wc -l) files, no build path)"
}

# A directive the unit must hold, exactly.
need() {
    grep -qxF "$2" "$stage$unitdir/$1" || fail "$1 lacks $2"
}

check_units() {
    command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed"
    prefix=${bindir%/bin}
    [ "$prefix" != "$bindir" ] && [ "$prefix" != /usr ] && [ -n "$prefix" ] ||
        skip "the prefix $prefix is not one a private bind mount may hide (give a prefix like /usr/local)"
    for u in moat-gateway.service moat-backend.service; do
        # the units name /bin/kill and the installed programs: bind the staged prefix over the real one
        out=$(unshare -m --propagation private sh -c 'mkdir -p "$2" && mount --bind "$1$2" "$2" && cd "$3" && systemd-analyze verify "$4"' \
            sh "$stage" "$prefix" "$unitdir" "$u" 2>&1) || {
            case $out in
            *unshare:* | *mount:*) skip "no private mount namespace here: $out" ;;
            esac
            fail "systemd-analyze verify $u: $out"
        }
        [ -z "$out" ] || fail "systemd-analyze verify $u: $out"
    done

    need moat-gateway.service "Type=notify"
    need moat-gateway.service "ExecReload=/bin/kill -HUP \$MAINPID"
    need moat-gateway.service "NoNewPrivileges=yes"
    need moat-gateway.service "ProtectSystem=strict"
    need moat-gateway.service "PrivateTmp=yes"
    need moat-gateway.service "ProtectHome=yes"
    need moat-gateway.service "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK"
    need moat-gateway.service "SystemCallFilter=@system-service seccomp"
    need moat-gateway.service "ReadWritePaths=/var/lib/moat/audit"
    grep -q "^CapabilityBoundingSet=CAP_" "$stage$unitdir/moat-gateway.service" || fail "moat-gateway.service has no capability bounding set"
    # the audit writer marks its logs append-only with the one capability it keeps
    grep -q "^CapabilityBoundingSet=.*CAP_LINUX_IMMUTABLE" "$stage$unitdir/moat-gateway.service" ||
        fail "moat-gateway.service's bounding set lacks CAP_LINUX_IMMUTABLE (the audit logs would lose chattr +a)"
    need moat-backend.service "Type=notify"
    need moat-backend.service "Delegate=yes"
    need moat-backend.service "NoNewPrivileges=yes"
    need moat-backend.service "KillMode=mixed"

    # the exposure scores, recorded in the man pages; a unit that loses its
    # hardening scores above these ceilings (0..100: ten times the score)
    for u in moat-gateway:35 moat-backend:50; do
        name=${u%%:*} ceiling=${u#*:}
        systemd-analyze security --offline=true --threshold="$ceiling" "$stage$unitdir/$name.service" >"$work/security" 2>&1 || {
            grep "Overall" "$work/security" >&2 || cat "$work/security" >&2
            fail "$name.service exposure is above $ceiling/100"
        }
        grep "Overall exposure" "$work/security" | sed 's/^→ /check_install: /'
    done
    echo "check_install: units OK"
}

case $mode in
layout) check_layout ;;
units) check_units ;;
*) fail "unknown mode $mode (layout or units)" ;;
esac
