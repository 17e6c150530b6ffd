#!/usr/bin/env bash
# bench/peers/run.sh --cpu: chainfd's fast CPU path against Pinocchio's aba and MuJoCo's
# mj_forward, one core, double precision, the same models and states (bench/peers/README.md).
# bench/peers/run.sh --gpu: chainfd on the GPU against MJX and MuJoCo Warp (gpu.sh).
#
# Needs build/ from scripts/setup.sh (it rebuilds the three chainfd libraries it links) and
# MuJoCo's wheel in .deps/venv. Installs Pinocchio (requirements-cpu.txt) into its own venv,
# .deps/peers; never touches .deps/venv. Builds into build/peers/.
#
# Options (--cpu): PEERS_MODELS="..." to replace the model list;
# PEERS_ARGS="..." extra arguments for peers_cpu (--rounds=R, --states=K, --round-ms=T,
# --pin-build=manual); PEERS_MARCH to override the -march (default: x86-64-v3 where chainfd's
# CMake uses it, i.e. when the CPU has avx2, fma and bmi2; else none).
set -euo pipefail
mode="${1:-}"
if [ "$mode" = "--gpu" ]; then
  exec "$(dirname "$0")/gpu.sh"
fi
cd "$(dirname "$0")/../.."
root=$PWD

if [ "$mode" != "--cpu" ]; then
  echo "usage: bench/peers/run.sh --cpu|--gpu" >&2
  exit 2
fi

mj_dir=$(ls -d .deps/venv/lib/python3*/site-packages/mujoco 2>/dev/null | head -1 || true)
mj_lib=$(ls "$mj_dir"/libmujoco.so.* 2>/dev/null | head -1 || true)
if [ -z "$mj_dir" ] || [ -z "$mj_lib" ] || [ ! -f "$mj_dir/include/mujoco/mujoco.h" ]; then
  echo "peers: MuJoCo's wheel is not in .deps/venv: run scripts/setup.sh first" >&2
  exit 1
fi
if [ ! -f build/CMakeCache.txt ]; then
  echo "peers: build/ is not configured: run scripts/setup.sh first" >&2
  exit 1
fi

# --- Pinocchio into .deps/peers ---------------------------------------------------------------
py=$(command -v python3.11 || command -v python3)
if [ ! -x .deps/peers/bin/python ]; then
  echo "peers: creating .deps/peers"
  "$py" -m venv .deps/peers
fi
.deps/peers/bin/python -m pip install -q --disable-pip-version-check -r bench/peers/requirements-cpu.txt
pfx=$(ls -d .deps/peers/lib/python3*/site-packages/cmeel.prefix | head -1)
pfx=$(cd "$pfx" && pwd)
for h in pinocchio/algorithm/aba.hpp eigen3/Eigen/Core urdfdom_headers/urdf_model/model.h; do
  [ -f "$pfx/include/$h" ] || { echo "peers: $pfx/include/$h missing after install" >&2; exit 1; }
done

# --- chainfd's libraries -----------------------------------------------------------------------
cmake --build build --target chainfd_kernels chainfd_adapters chainfd_scenes chainfd_plugin >/dev/null

# --- the peer programs --------------------------------------------------------------------------
march="${PEERS_MARCH-}"
if [ -z "${PEERS_MARCH+x}" ]; then
  if grep -q ' avx2 ' /proc/cpuinfo && grep -q ' fma ' /proc/cpuinfo && grep -q ' bmi2 ' /proc/cpuinfo; then
    march=x86-64-v3
  fi
fi
cxx="${CXX:-g++}"
pin_defs="-DBOOST_MPL_LIMIT_LIST_SIZE=30 -DBOOST_MPL_LIMIT_VECTOR_SIZE=30 -DBOOST_MPL_CFG_NO_PREPROCESSED_HEADERS -DBOOST_FUSION_INVOKE_MAX_ARITY=12"
pin_inc="-I$pfx/include -I$pfx/include/eigen3 -I$pfx/include/urdfdom_headers"
out=build/peers
mkdir -p "$out"
mj_real=$(cd "$mj_dir" && pwd)

# the MJCF parser helper: built as the wheel's libraries expect (its defines, no -march)
build_helper() {
  $cxx -std=c++17 -O2 -DNDEBUG $pin_defs -DPINOCCHIO_ENABLE_TEMPLATE_INSTANTIATION \
    -DPINOCCHIO_WITH_URDFDOM -DPINOCCHIO_URDFDOM_HEADERS_MAJOR_VERSION=3 \
    -DPINOCCHIO_URDFDOM_HEADERS_MINOR_VERSION=0 -DPINOCCHIO_URDFDOM_HEADERS_PATCH_VERSION=0 \
    $pin_inc bench/peers/pin_mjcf2bin.cpp -o "$out/pin_mjcf2bin" \
    -L"$pfx/lib" -lpinocchio_parsers -lpinocchio_default -lboost_serialization -Wl,-rpath,"$pfx/lib"
}
# the timed program: Pinocchio header-only, chainfd's flags
build_main() {
  $cxx -std=c++17 -O3 ${march:+-march=$march} -DNDEBUG $pin_defs \
    -Ikernels -Iadapters -Iinclude -I"$mj_real/include" $pin_inc \
    bench/peers/peers_cpu.cpp -o "$out/peers_cpu" \
    build/libchainfd_scenes.a build/libchainfd_adapters.a build/libchainfd_kernels.a \
    "$root/build/plugin/libchainfd_plugin.so" -Wl,-rpath,"$root/build/plugin" \
    -L"$pfx/lib" -lboost_serialization -Wl,-rpath,"$pfx/lib" \
    "$(cd "$(dirname "$mj_lib")" && pwd)/$(basename "$mj_lib")" -Wl,-rpath,"$mj_real" -lm
}
stamp="$out/.flags"
flags="$cxx|$march|$pfx|$mj_lib|$(cat bench/peers/requirements-cpu.txt | md5sum)"
need() {  # rebuild when the source, chainfd's libraries or the flags changed
  [ ! -x "$1" ] || [ "$2" -nt "$1" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$flags" ] && return 0
  for l in build/libchainfd_scenes.a build/libchainfd_adapters.a build/libchainfd_kernels.a \
           build/plugin/libchainfd_plugin.so; do
    [ "$l" -nt "$1" ] && return 0
  done
  return 1
}
echo "peers: building with $cxx -O3 ${march:+-march=$march} (Pinocchio header-only, as chainfd's kernels)" >&2
pids=()
if need "$out/pin_mjcf2bin" bench/peers/pin_mjcf2bin.cpp; then build_helper >"$out/helper.log" 2>&1 & pids+=("$!:helper"); fi
if need "$out/peers_cpu" bench/peers/peers_cpu.cpp; then build_main >"$out/main.log" 2>&1 & pids+=("$!:main"); fi
for p in "${pids[@]}"; do
  if ! wait "${p%%:*}"; then
    grep -E "error|undefined" "$out/${p#*:}.log" | head -20 >&2
    echo "peers: building ${p#*:} failed; the full log is $out/${p#*:}.log" >&2
    exit 1
  fi
done
echo "$flags" > "$stamp"

# --- run ---------------------------------------------------------------------------------------
models="${PEERS_MODELS:-scenes/arm7.xml chain:10,random=1,seed=1,armature=0.01 chain:64,random=1,seed=1,armature=0.01 chain:200,random=1,seed=1,armature=0.01 chain:1000,random=1,seed=1,armature=0.01}"
xml_dir="$out/models"
mkdir -p "$xml_dir"
echo "peers: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); pin $(.deps/peers/bin/python -c 'import importlib.metadata as m; print(m.version("pin"))'); mujoco $(basename "$mj_lib" | sed 's/libmujoco.so.//'); $($cxx --version | head -1)" >&2
# shellcheck disable=SC2086
exec "$out/peers_cpu" --xml-dir="$xml_dir" --mjcf-helper="$root/$out/pin_mjcf2bin" ${PEERS_ARGS:-} $models
