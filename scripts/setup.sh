#!/usr/bin/env bash
# Sets up chainfd on a fresh Debian machine: system packages, MuJoCo (from its official wheel,
# version pinned in python/requirements.txt) into a project-local venv, and a Release build in build/.
# Safe to run again: every step is skipped when already done.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

need_pkgs=()
for pkg in cmake build-essential python3-venv libglfw3-dev zlib1g-dev libx11-dev xvfb xauth \
           libegl-dev libegl-mesa0 libgl1-mesa-dri; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_pkgs[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

py="${PYTHON:-python3}"
if [ ! -x .deps/venv/bin/python ]; then
  echo "setup: creating .deps/venv"
  "$py" -m venv .deps/venv
fi
if ! .deps/venv/bin/python -m pip install -q --disable-pip-version-check -r python/requirements.txt; then
  echo "setup: could not install MuJoCo from PyPI (python/requirements.txt)" >&2; exit 1
fi
# the chainfd Python package (python/), editable: it finds the plugin library in build/
.deps/venv/bin/python -m pip install -q --disable-pip-version-check -e python

# CUDA: built whenever nvcc is found (on PATH or in /usr/local/cuda).
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${CHAINFD_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)"
echo "setup: done (build/)"
