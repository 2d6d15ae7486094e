#!/bin/sh
# Certificates for trying and testing TLS, made with the openssl command
# line in DIR (created if missing): ca.pem/ca.key (a CA), server.pem/.key
# (for localhost and 127.0.0.1), wronghost.pem/.key (for wrong.example
# only), expired.pem/.key (valid for one day, 400 days ago: signed under
# faketime), client.pem/.key (a client certificate), other-ca.pem (a CA
# that signed none of them). EC P-256 keys: quick to make.
#
#   scripts/tls-certs.sh DIR
#
# Used by the test harness (tests/harness.c, th_tls_certs) and
# bench/tls.sh. Not for production: the keys are unencrypted and the CA is
# a throwaway.
set -eu
trap 'st=$?; [ $st -eq 0 ] || echo "tls-certs.sh: failed (status $st) in ${1:-}" >&2' EXIT
dir=${1:?usage: tls-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
ca() {
    key "$1"
    openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 30 -subj "/CN=$1" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}
# The expired certificate is signed 400 days in the past under libfaketime,
# preloaded directly: the `faketime` wrapper keeps a semaphore and a shared
# memory segment named after its PID in /dev/shm and refuses to run when
# one of that name exists, which one left by a wrapper that was killed
# makes true again whenever PIDs wrap around to it (the test suites kill
# process groups often): that failed the TLS topologies of a whole test
# run, a PID range at a time. The wrapper is the fallback where the
# library is not found.
past() {
    lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1 2>/dev/null | head -n 1)
    if [ -n "$lib" ]; then
        LD_PRELOAD="$lib" FAKETIME=-400d "$@"
    else
        faketime -f -400d "$@"
    fi
}
# leaf NAME CN EXTENSION [WRAPPER DAYS]: a certificate signed by ca.
leaf() {
    key "$1"
    openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
    printf '%s\n' "$3" >"$1.ext"
    ${4:-} openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days "${5:-30}" \
        -extfile "$1.ext" -out "$1.pem" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}
ca ca
ca other-ca
leaf server localhost 'subjectAltName=DNS:localhost,IP:127.0.0.1'
leaf wronghost wrong.example 'subjectAltName=DNS:wrong.example'
leaf expired localhost 'subjectAltName=DNS:localhost,IP:127.0.0.1' past 1
leaf client dlock-client 'extendedKeyUsage=clientAuth'
chmod 600 ./*.key
