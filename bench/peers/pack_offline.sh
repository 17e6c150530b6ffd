#!/usr/bin/env bash
# bench/peers/pack_offline.sh DIR: the GPU peers' packages for a machine that has no package
# registry and takes files in pieces of limited size (this team's GPU machine: no PyPI, at most
# 64 MiB a transfer). Run where pip works; copy DIR over, then on the GPU machine
#   PEERS_OFFLINE=DIR bench/peers/run.sh --gpu
# DIR gets: the wheels of requirements-gpu.txt that the GPU machine lacks (Python 3.12,
# manylinux x86-64; JAX, PyTorch, NumPy, SciPy, absl-py and etils are taken as installed there),
# and warp-lang repacked: its wheel holds warp.so (the CUDA runtime side, about 300 MB) and
# warp-clang.so (the CPU kernel compiler, 69 MB). MuJoCo Warp on a GPU needs only the first:
# warp-clang.so is left out (Warp then reports CPU kernels unavailable), warp.so is xz-compressed
# and split into pieces of at most PIECE_MB (default 40), the rest of the package is one tarball.
set -euo pipefail
dir="${1:?usage: bench/peers/pack_offline.sh DIR}"
mkdir -p "$dir" && dir=$(cd "$dir" && pwd)  # (relative to the caller's directory)
cd "$(dirname "$0")/../.."
command -v unzip >/dev/null || { echo "pack_offline: needs unzip" >&2; exit 1; }
piece="${PIECE_MB:-40}"
mkdir -p "$dir"
req=bench/peers/requirements-gpu.txt
# the pinned names of requirements-gpu.txt, without those the GPU machine has
pkgs=$(grep -Ev '^\s*(#|$)' "$req" | grep -Evi '^(jax(\[[^]]*\])?|jaxlib|jax-cuda13-plugin|jax-cuda13-pjrt|torch|numpy|scipy|absl-py|etils|warp-lang)==' | sed 's/\s*#.*//')
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any -d "$dir" $pkgs
warp=$(grep -Ei '^warp-lang==' "$req" | sed 's/\s*#.*//')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d "$tmp" "$warp"
(cd "$tmp" && unzip -q warp_lang-*.whl && rm warp_lang-*.whl warp/bin/warp-clang.so)
rm -f "$dir"/warp.so.xz.part*  # (pieces of an earlier run with another size would join these)
xz -T0 -6 -c "$tmp/warp/bin/warp.so" | split -b "${piece}m" -d - "$dir/warp.so.xz.part"
rm "$tmp/warp/bin/warp.so"
tar -C "$tmp" -czf "$dir/warp_lang_site.tgz" .
ls -la "$dir"
