#!/bin/sh
# Install what building, testing and the demo need, from Debian's archive;
# with --valkey (the test set-up: make deps, make test...) Valkey as well.
# Idempotent: does nothing when every package is present. Needs root (or
# sudo) only when something is missing.
set -eu
PKGS="cmake make gcc pkg-config clang-format spin libhiredis-dev redis-server redis-sentinel redis-tools libcmocka-dev libmicrohttpd-dev libsqlite3-dev libpq-dev postgresql libjansson-dev libssl-dev libuv1-dev openssl ca-certificates faketime python3 python3-pytest python3-redis python3-setuptools python3-pip python3-venv"
# The suites run against Valkey 8 too (the @valkey ctest entries). Bookworm
# has it only in backports; later releases carry it in main.
VALKEY_PKGS=""
case "${1:-}" in
    --valkey) VALKEY_PKGS="valkey-server valkey-sentinel valkey-tools" ;;
    "") ;;
    *) echo "usage: $0 [--valkey]" >&2; exit 64 ;;
esac
BACKPORTS_LIST=/etc/apt/sources.list.d/dlock-bookworm-backports.list

not_installed() {
    out=""
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || out="$out $p"
    done
    echo "$out"
}

# shellcheck disable=SC2086
missing=$(not_installed $PKGS)
# shellcheck disable=SC2086
missing_valkey=$(not_installed $VALKEY_PKGS)
[ -z "$missing$missing_valkey" ] && exit 0
echo "install-deps: installing:$missing$missing_valkey" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "install-deps: need root to install:$missing$missing_valkey" >&2; exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive

# Bookworm-backports is added only here and only when Valkey is missing
# (an existing source for it is reused). Only the Valkey install asks for
# it (-t); for everything else apt keeps backports at its low default
# priority, so no other package is ever upgraded from there.
codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release 2>/dev/null)
from=""
if [ -n "$missing_valkey" ] && [ "$codename" = bookworm ]; then
    from="-t bookworm-backports"
    if ! grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        echo "deb http://deb.debian.org/debian bookworm-backports main" | $SUDO tee "$BACKPORTS_LIST" >/dev/null
    fi
fi

$SUDO apt-get update -qq
if [ -n "$missing" ]; then
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
if [ -n "$missing_valkey" ]; then
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $from $missing_valkey >/dev/null
fi
