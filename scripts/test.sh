#!/usr/bin/env bash
# Runs every test: the Release build's ctest suite (GPU tests report SKIPPED where there is no CUDA
# device), then the CPU tests again in an AddressSanitizer + UndefinedBehaviorSanitizer build.
# Sets the project up first when that has not been done.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
[ -f build/CMakeCache.txt ] || scripts/setup.sh
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)"

echo "== CPU tests under ASan/UBSan (build-asan/) =="
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHAINFD_SANITIZE=ON -DCHAINFD_CUDA=OFF >/dev/null
cmake --build build-asan -j "$(nproc)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -L cpu --output-on-failure -j "$(nproc)"
