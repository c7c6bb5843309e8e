#!/usr/bin/env bash
# certs.sh DIR NAME... — makes the certificates tests use, at run time, in DIR:
#   ca.pem, ca.key                 a certificate authority
#   NAME.pem, NAME.key             for each NAME: a certificate with common name NAME,
#                                  signed by ca, valid for 127.0.0.1 and localhost
#   rogue-ca.pem, rogue-NAME.pem/.key  the same names signed by another authority
# EC P-256 keys (quick to make), valid for two days. Keys are mode 0600.
set -euo pipefail
dir=$1; shift
cd "$dir"
umask 077
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
san=san.ext
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n' >"$san"
for ca in ca rogue-ca; do
  openssl req -x509 "${ec[@]}" -keyout "$ca.key" -out "$ca.pem" -days 2 -subj "/CN=$ca" \
    2>/dev/null
done
for name in "$@"; do
  for ca in ca rogue-ca; do
    out=$name
    [ "$ca" = ca ] || out=rogue-$name
    openssl req "${ec[@]}" -keyout "$out.key" -out "$out.csr" -subj "/CN=$name" 2>/dev/null
    openssl x509 -req -in "$out.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial \
      -out "$out.pem" -days 2 -extfile "$san" 2>/dev/null
    rm -f "$out.csr"
  done
done
