#!/usr/bin/env bash
# Installs the Debian 12 packages tqserve needs to build, test and serve, and
# the pinned npm packages of the integration tests (tests/integration).
# Idempotent: only missing packages are installed (apt-get, as root or via
# sudo), and `npm ci` runs only when node_modules is missing or the lockfile
# changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libsentencepiece-dev     # tokenizer.model (SentencePiece)
  nlohmann-json3-dev       # config.json, safetensors headers
  libcli11-dev             # command line
  libspdlog-dev libfmt-dev # logging (server side)
  libgtest-dev libgmock-dev
  python3 python3-numpy python3-sentencepiece  # independent test references
  libcpp-httplib-dev       # HTTP server (daemon) and client (serving benchmark)
  prometheus-cpp-dev       # /metrics
  prometheus               # promtool, checks /metrics in the integration tests
  python3-jinja2           # reference renderer for the chat template tests
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # gRPC API
)
# node and npm run the integration tests with the real `openai` client; a
# node installed another way (e.g. NodeSource) is used as it is.
command -v node >/dev/null 2>&1 || PACKAGES+=(nodejs)
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The integration tests' npm packages, exactly as package-lock.json pins them.
INTEG="$ROOT/tests/integration"
if [ -f "$INTEG/package-lock.json" ]; then
  stamp="$INTEG/node_modules/.tqserve-lock.sha256"
  want="$(sha256sum "$INTEG/package-lock.json" | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "install_deps: npm ci in tests/integration"
    (cd "$INTEG" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" >"$stamp"
  fi
fi
