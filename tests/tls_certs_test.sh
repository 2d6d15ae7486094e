#!/bin/sh
# scripts/tls-certs.sh makes its certificates even where /dev/shm holds
# what killed `faketime` wrappers leave behind: a semaphore named after a
# PID that a new wrapper would get. Those names are made here for the next
# 60 PIDs; the script must still succeed and its expired certificate must
# have ended in the past. (With the wrapper, it failed: the TLS topologies
# of a whole test run then could not start.)
#
# usage: tls_certs_test.sh SOURCE_DIR
set -eu
src=$1
tmp=$(mktemp -d /tmp/dlock-certs-XXXXXX)
base=$$
cleanup() {
    i=1
    while [ $i -le 60 ]; do rm -f "/dev/shm/sem.faketime_sem_$((base + i))"; i=$((i + 1)); done
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
i=1
while [ $i -le 60 ]; do
    [ -e "/dev/shm/sem.faketime_sem_$((base + i))" ] || : >"/dev/shm/sem.faketime_sem_$((base + i))"
    i=$((i + 1))
done
sh "$src/scripts/tls-certs.sh" "$tmp/certs"
for f in ca server wronghost expired client other-ca; do
    [ -s "$tmp/certs/$f.pem" ] || { echo "tls_certs_test: $f.pem missing" >&2; exit 1; }
done
if openssl x509 -in "$tmp/certs/expired.pem" -noout -checkend 0 >/dev/null; then
    echo "tls_certs_test: expired.pem has not expired" >&2
    exit 1
fi
openssl x509 -in "$tmp/certs/server.pem" -noout -checkend 86400 >/dev/null ||
    { echo "tls_certs_test: server.pem expires within a day" >&2; exit 1; }
echo "tls_certs_test: certificates made beside 60 leftover faketime semaphores"
