#!/usr/bin/env bash
# certs.sh DIR NAME[:server]... — makes the certificates tests use, at run time, in DIR,
# as docs/SECURITY.md's recipe makes them (each identity gets only what it needs):
#   ca.pem, ca.key                 a certificate authority
#   NAME.pem, NAME.key             for each NAME: a certificate with common name NAME,
#                                  signed by ca, for a client's use (extendedKeyUsage
#                                  clientAuth); NAME:server also for a server's (serverAuth)
#   rogue-ca.pem, rogue-NAME.pem/.key  the same names signed by another authority
# No certificate holds an address: a server is known by its name, not where it is.
# EC P-256 keys (quick to make), valid for two days. Keys are mode 0600.
set -euo pipefail
dir=$1; shift
cd "$dir"
umask 077
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' >client.ext
printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n' >server.ext
for ca in ca rogue-ca; do
  openssl req -x509 "${ec[@]}" -keyout "$ca.key" -out "$ca.pem" -days 2 -subj "/CN=$ca" \
    2>/dev/null
done
for spec in "$@"; do
  name=${spec%%:*}
  ext=client.ext
  [ "$spec" = "$name:server" ] && ext=server.ext
  for ca in ca rogue-ca; do
    out=$name
    [ "$ca" = ca ] || out=rogue-$name
    openssl req "${ec[@]}" -keyout "$out.key" -out "$out.csr" -subj "/CN=$name" 2>/dev/null
    openssl x509 -req -in "$out.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial \
      -out "$out.pem" -days 2 -extfile "$ext" 2>/dev/null
    rm -f "$out.csr"
  done
done
