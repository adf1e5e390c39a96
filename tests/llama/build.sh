#!/usr/bin/env bash
# A real llama.cpp llama-server and a tiny model for `make test-llama`, with
# nothing but PyPI: llama.cpp's source comes vendored in the llama-cpp-python
# sdist, the model is written by tests/llama/tiny_model.py. Into $OUT
# (default .cache/llama): bin/llama-server and tiny.gguf. Takes 5-10 minutes
# on two cores, once.
set -euo pipefail
for tool in cmake g++; do
  command -v "$tool" >/dev/null || {
    echo "tests/llama/build.sh needs cmake and a C++ compiler: apt-get install cmake g++" >&2
    exit 1
  }
done
OUT=${OUT:-.cache/llama}
VERSION=0.3.36   # vendors llama.cpp 0c1e570
PYTHON=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ ! -x "$OUT/bin/llama-server" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # 76 MB: a download cut short fails its hash, so try again.
  for attempt in 1 2 3; do
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
      "llama-cpp-python==$VERSION" -d "$work" && break
    [ "$attempt" = 3 ] && exit 1
  done
  tar xzf "$work/llama_cpp_python-$VERSION.tar.gz" -C "$work"
  # No curl, TLS or web UI: the build downloads nothing.
  cmake -S "$work/llama_cpp_python-$VERSION/vendor/llama.cpp" -B "$work/build" \
    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF > "$work/cmake.log"
  cmake --build "$work/build" --target llama-server -j"$(nproc)" > "$work/build.log"
  mkdir -p "$OUT/bin"
  cp "$work/build/bin/llama-server" "$OUT/bin/llama-server"
fi
[ -f "$OUT/tiny.gguf" ] || "$PYTHON" tests/llama/tiny_model.py "$OUT/tiny.gguf"
"$OUT/bin/llama-server" --version
