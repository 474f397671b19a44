#!/usr/bin/env bash
# Installs the Debian 12 packages tqserve needs to build, test and serve.
# Idempotent: only missing packages are installed (apt-get, as root or via sudo).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libsentencepiece-dev     # tokenizer.model (SentencePiece)
  nlohmann-json3-dev       # config.json, safetensors headers
  libcli11-dev             # command line
  libspdlog-dev libfmt-dev # logging (server side)
  libgtest-dev libgmock-dev
  python3 python3-numpy python3-sentencepiece  # independent test references
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
