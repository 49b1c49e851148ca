#!/bin/sh
# Make a Python that runs in any Linux task image from the shared volume /.farm/python:
# the interpreter, its standard library, every shared library it loads and the dynamic
# loader itself, with the ELF interpreter and rpaths pointing into the bundle. The task
# image needs no Python, no glibc of a particular version (musl images work too).
set -eu
DEST=${1:-/opt/farm/python}      # where the bundle is built in the toolbox image
RUNTIME=${2:-/.farm/python}      # where the init container copies it in every pod
PY=$(readlink -f /usr/bin/python3)
VER=$(basename "$PY")            # python3.11
mkdir -p "$DEST/bin" "$DEST/lib"
cp "$PY" "$DEST/bin/$VER"
ln -sf "$VER" "$DEST/bin/python3"
cp -a "/usr/lib/$VER" "$DEST/lib/$VER"
rm -rf "$DEST/lib/$VER/test" "$DEST/lib/$VER/idlelib" "$DEST/lib/$VER/tkinter" "$DEST/lib/$VER/ensurepip"
find "$DEST/lib/$VER" -name __pycache__ -prune -exec rm -rf {} +
LOADER=$(patchelf --print-interpreter "$PY")
for f in "$DEST/bin/$VER" "$DEST/lib/$VER"/lib-dynload/*.so; do
  ldd "$f" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do cp -L "$lib" "$DEST/lib/"; done
cp -L "$LOADER" "$DEST/lib/$(basename "$LOADER")"
patchelf --set-interpreter "$RUNTIME/lib/$(basename "$LOADER")" --set-rpath '$ORIGIN/../lib' "$DEST/bin/$VER"
for so in "$DEST/lib/$VER"/lib-dynload/*.so; do patchelf --set-rpath '$ORIGIN/../..' "$so"; done
for so in "$DEST"/lib/*.so*; do
  case "$so" in */ld-linux*) ;; *) patchelf --set-rpath '$ORIGIN' "$so" 2>/dev/null || true ;; esac
done
chmod -R a+rX "$DEST"
