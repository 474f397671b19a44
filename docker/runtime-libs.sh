#!/usr/bin/env bash
# Copies the shared libraries a binary needs (as ldd resolves them) into DEST,
# for the runtime stage of the container images: the build stage's libraries
# (gRPC, protobuf, sentencepiece, spdlog, prometheus-cpp, ...) travel with the
# binary, so the runtime image needs no -dev packages and no list of runtime
# package names that differs between Debian and Ubuntu.
#
# Left out: the C library itself (libc, libm, ld-linux, ...: every base image
# has it, and the runtime stage uses the build stage's distribution release)
# and the NVIDIA driver (libcuda, libnvidia-*: the container runtime mounts the
# host's). Usage: runtime-libs.sh BINARY DEST_DIR. Fails when ldd cannot
# resolve a library.
set -euo pipefail
bin="$1"
dest="$2"
mkdir -p "$dest"
# The driver is not in a build container; everything else must resolve.
unresolved="$(ldd "$bin" | grep 'not found' | grep -v -E '^\s*(libcuda\.so|libnvidia-)' || true)"
if [ -n "$unresolved" ]; then
  echo "runtime-libs: unresolved libraries of $bin:" >&2
  echo "$unresolved" >&2
  exit 1
fi
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
  case "$name" in
    libc.so.* | libm.so.* | libdl.so.* | librt.so.* | libpthread.so.* | ld-linux*) continue ;;
    libcuda.so.* | libnvidia-*) continue ;;
  esac
  cp -L "$path" "$dest/$name"
done
