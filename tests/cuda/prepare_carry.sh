#!/usr/bin/env bash
# Prepares third_party/carry/ (git-ignored) with the header-only and source
# dependencies that the GPU test machine lacks, so that run_device.sh can build
# the engine, the CUDA kernels and their tests there with CUDA, CMake and a C++
# compiler only:
#   third_party/carry/googletest        <- /usr/src/googletest (Debian googletest)
#   third_party/carry/nlohmann_json/include/nlohmann <- /usr/include/nlohmann
# Run it here (where scripts/install_deps.sh installed both), then pass
# carry=["third_party/carry"] to the device run (see run_device.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=third_party/carry
rm -rf "$dest"
mkdir -p "$dest/nlohmann_json/include"
for src in /usr/src/googletest /usr/include/nlohmann; do
  [[ -d $src ]] || { echo "prepare_carry: $src missing (run scripts/install_deps.sh)" >&2; exit 1; }
done
cp -r /usr/src/googletest "$dest/googletest"
cp -r /usr/include/nlohmann "$dest/nlohmann_json/include/nlohmann"
du -sh "$dest"
