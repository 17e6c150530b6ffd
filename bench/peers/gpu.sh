#!/usr/bin/env bash
# bench/peers/run.sh --gpu: chainfd on the GPU beside MJX (JAX) and MuJoCo Warp, the same models,
# states' distribution and problems, in one run on one machine (bench/peers/README.md).
#
# Needs build/ configured with CUDA (scripts/setup.sh on a machine with nvcc) and a GPU. The peers'
# Python packages: a project-local venv .deps/peers-gpu from requirements-gpu.txt (where PyPI is
# reachable), or, with PEERS_OFFLINE=DIR, the packages bench/peers/pack_offline.sh put in DIR,
# unpacked into .deps/peers-gpu-site for the machine's own python3 (which must have JAX with CUDA).
# Writes build/peers/gpu/: chainfd_*.json, peers_*.json, peers_gpu.md, peers_gpu_{fd,step}.png,
# and prints the table's lines. PEERS_GPU_QUICK=1: small batches and no 1000-link chain (a try).
set -euo pipefail
if [ -n "${PEERS_OFFLINE:-}" ]; then  # (relative to the caller's directory)
  PEERS_OFFLINE=$(cd "$PEERS_OFFLINE" && pwd)
fi
cd "$(dirname "$0")/../.."
out=build/peers/gpu
mkdir -p "$out" "$out/models"
[ -f build/CMakeCache.txt ] || { echo "peers: build/ is not configured: run scripts/setup.sh first" >&2; exit 1; }
cmake --build build --target chainfd chainfd-bench-gpu >/dev/null  # (a stale build may lack .mjb)

# --- the peers' Python ------------------------------------------------------------------------
if [ -n "${PEERS_OFFLINE:-}" ]; then
  site=$PWD/.deps/peers-gpu-site
  stamp="$(cd "$PEERS_OFFLINE" && ls -l)"  # (a repacked DIR is unpacked again)
  if [ "$(cat "$site/.done" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$site" && mkdir -p "$site"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$PEERS_OFFLINE"/*.whl
    tar -xzf "$PEERS_OFFLINE/warp_lang_site.tgz" -C "$site"
    cat "$PEERS_OFFLINE"/warp.so.xz.part* | xz -d > "$site/warp/bin/warp.so"
    echo "$stamp" > "$site/.done"
  fi
  py=python3
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
else
  if [ ! -x .deps/peers-gpu/bin/python ]; then
    python3 -m venv .deps/peers-gpu
  fi
  .deps/peers-gpu/bin/python -m pip install -q --disable-pip-version-check -r bench/peers/requirements-gpu.txt
  py=.deps/peers-gpu/bin/python
fi

# --- the models: arm7 as it is, the chains written by chainfd (the same mjModel either side).
# The 1000-link chain only as MuJoCo's binary model (MJCF cannot carry that depth), which
# peers_gpu.py does not read yet: chainfd alone runs it ---------------------------------------
short=(--model arm7=scenes/arm7.xml)
for n in 10 64 200; do
  build/chainfd export "chain:$n,random=1,seed=1,armature=0.01" "$out/models/chain$n.xml" >/dev/null
  short+=(--model "chain$n=$out/models/chain$n.xml")
done
H=${PEERS_HORIZON:-64}
batches="1,64,1024,4096,16384,65536"
if [ -n "${PEERS_GPU_QUICK:-}" ]; then
  batches="1,64"
  short=("${short[@]:0:4}")  # arm7 and the 10-link chain
fi
if [ -z "${PEERS_GPU_QUICK:-}" ]; then
  build/chainfd export "chain:1000,random=1,seed=1,armature=0.01" "$out/models/chain1000.mjb" >/dev/null
  mkdir -p "$out/chainfd_large"
  build/bench/chainfd-bench-gpu --only peers --model "chain1000=$out/models/chain1000.mjb" \
    --batches 1,16,64,256 --horizon "$H" --budget 0.1 --out "$out/chainfd_large"
fi

# --- chainfd, then the peers, on the same models and batches -----------------------------------
mkdir -p "$out/chainfd_small"
build/bench/chainfd-bench-gpu --only peers "${short[@]}" --batches "$batches" --horizon "$H" \
  --budget 0.1 --out "$out/chainfd_small"
"$py" bench/peers/peers_gpu.py "${short[@]}" --batches "$batches" --horizon "$H" \
  --peers "${PEERS:-mjx32,mjx64,warp}" --what fd,step --out "$out/peers_small.json"
chainfd_json=("$out"/chainfd_*/bench_gpu.json)
"$py" bench/peers/table_gpu.py --chainfd "${chainfd_json[@]}" --peers "$out"/peers_*.json --out "$out"
