#!/bin/sh
# gen-dev-certs.sh - make a throwaway development CA and a server
# certificate for localhost / 127.0.0.1 / ::1, signed by it.
#
# usage: certs/gen-dev-certs.sh OUTDIR
#
# Writes OUTDIR/ca.pem (the CA certificate clients trust), OUTDIR/ca.key,
# OUTDIR/server.pem (certificate chain) and OUTDIR/server.key.  Keys are
# made fresh on every call and are mode 0600; nothing here is committed.
# For production, point tls.certificate / tls.key in gateway.conf at a
# certificate from your own CA or ACME client instead (see moat-gateway(8), "TLS").
set -eu

if [ $# -ne 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
out=$1
mkdir -p "$out"
chmod 0700 "$out"
umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

openssl ecparam -name prime256v1 -genkey -noout -out "$out/ca.key" 2>/dev/null
openssl req -x509 -new -key "$out/ca.key" -sha256 -days 30 \
    -subj "/CN=moat dev CA (throwaway)" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$out/ca.pem"

openssl ecparam -name prime256v1 -genkey -noout -out "$out/server.key" 2>/dev/null
openssl req -new -key "$out/server.key" -subj "/CN=localhost" -out "$tmp/server.csr"
cat > "$tmp/ext.cnf" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1
EXT
openssl x509 -req -in "$tmp/server.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" \
    -CAcreateserial -CAserial "$tmp/ca.srl" -days 30 -sha256 \
    -extfile "$tmp/ext.cnf" -out "$out/server.pem" 2>/dev/null
chmod 0644 "$out/ca.pem" "$out/server.pem"
echo "dev certificates in $out (CA: $out/ca.pem)"
