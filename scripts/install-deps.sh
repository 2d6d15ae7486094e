#!/bin/sh
# Install what building, testing and the demo need, from Debian's archive.
# Idempotent: does nothing when every package is present. Needs root (or
# sudo) only when something is missing.
set -eu
PKGS="cmake make gcc pkg-config libhiredis-dev redis-server redis-sentinel redis-tools libcmocka-dev libmicrohttpd-dev libsqlite3-dev libpq-dev postgresql libjansson-dev libssl-dev faketime python3 python3-pytest python3-redis python3-setuptools python3-pip python3-venv"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing:$missing" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "install-deps: need root to install:$missing" >&2; exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
