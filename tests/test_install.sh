#!/usr/bin/env bash
# test_install.sh — installs the build into a temporary prefix and builds a
# user program against it with nothing but the public header and the
# pkg-config file, linking the shared library and then the static one; then
# builds the installed template observer plugin with the one command
# docs/OBSERVERS.md gives, and checks what the plugin exports and needs.
# Usage: test_install.sh BUILD_DIR CC [EXTRA_CFLAGS (the build's sanitizer flags)]
set -euo pipefail
build=$1
cc=${2:-cc}
extra=${3:-}
tmp=$(mktemp -d /tmp/pc-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name percolator.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: no percolator.pc installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir percolator)
cat > "$tmp/user.c" <<'C'
#include <percolator/percolator.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
  pc_error_t err;
  pc_options_t *o = pc_options_create();
  pc_options_set_create_if_missing(o, 1);
  pc_db_t *db = pc_db_open(o, argv[1], &err);
  pc_options_destroy(o);
  if (!db) { fprintf(stderr, "open: %s\n", err.text); return 1; }
  pc_txn_t *t = pc_txn_begin(db, &err);
  pc_txn_set(t, "t", "r", 1, "c:", 2, "hello", 5, &err);
  if (pc_txn_commit(t, &err) != PC_OK) { fprintf(stderr, "commit: %s\n", err.text); return 1; }
  pc_txn_destroy(t);
  t = pc_txn_begin(db, &err);
  char *v; size_t n;
  int ok = pc_txn_get(t, "t", "r", 1, "c:", 2, &v, &n, &err) == PC_OK && n == 5 && !memcmp(v, "hello", 5);
  pc_free(v);
  pc_txn_destroy(t);
  pc_db_close(db);
  /* a cluster's client too (a configuration that is not there): links the
   * coordination on ZooKeeper, which a static link takes from Libs.private */
  if (argc > 2 && pc_db_open_config(argv[2], &err) != NULL) return 1;
  return ok ? 0 : 1;
}
C
# shared
$cc -std=c11 $extra "$tmp/user.c" $(pkg-config --cflags --libs percolator) -Wl,-rpath,"$libdir" -o "$tmp/user-shared"
"$tmp/user-shared" "$tmp/db1" "$tmp/none.json" || { echo "FAIL: program linked to the shared library"; exit 1; }
# static
$cc -std=c11 $extra "$tmp/user.c" $(pkg-config --cflags percolator) "$libdir/libpercolator.a" \
   $(pkg-config --static --libs-only-l percolator | sed 's/-lpercolator//') -o "$tmp/user-static"
"$tmp/user-static" "$tmp/db2" "$tmp/none.json" || { echo "FAIL: program linked to the static library"; exit 1; }
# the shared library exports the public API and nothing else
declared=$(grep -hv '#define' "$tmp"/prefix/include/percolator/*.h | tr '\n' ' ' | grep -o 'PC_EXPORT [^(;]*(' |
           sed 's/($//; s/.*[ *]//' | sort -u)
exported=$(nm -D --defined-only "$libdir/libpercolator.so" | awk '$2 == "T" {print $3}' | sort -u)
if [ "$declared" != "$exported" ]; then
  echo "FAIL: libpercolator.so's exports differ from the public headers' PC_EXPORT functions:"
  diff <(echo "$declared") <(echo "$exported") || true
  exit 1
fi
# an observer plugin: the installed example, built as docs/OBSERVERS.md says
template=$(find "$tmp/prefix" -path '*/examples/template.c' | head -n 1)
[ -n "$template" ] || { echo "FAIL: the example plugins are not installed"; exit 1; }
cp "$template" "$tmp/template.c"
(cd "$tmp" && $cc $extra -shared -fPIC -o template.so template.c $(pkg-config --cflags percolator))
for sym in pc_plugin_magic pc_plugin_init; do
  nm -D --defined-only "$tmp/template.so" | grep -qw "T $sym" ||
    { echo "FAIL: template.so does not export $sym"; exit 1; }
done
if readelf -d "$tmp/template.so" | grep NEEDED | grep -q percolator; then
  echo "FAIL: template.so links libpercolator (plugins reach the host through its table)"; exit 1
fi
# authors who hide their symbols by default still export the entry points
$cc $extra -shared -fPIC -fvisibility=hidden -o "$tmp/hidden.so" "$tmp/template.c" \
  $(pkg-config --cflags percolator)
for sym in pc_plugin_magic pc_plugin_init; do
  nm -D --defined-only "$tmp/hidden.so" | grep -qw "T $sym" ||
    { echo "FAIL: with -fvisibility=hidden, the plugin does not export $sym"; exit 1; }
done
echo "install: header, pkg-config file, shared and static libraries, and a plugin build work"
