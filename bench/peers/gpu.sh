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
cd "$(dirname "$0")/../.."
out=build/peers/gpu
mkdir -p "$out" "$out/models"
for t in build/chainfd build/bench/chainfd-bench-gpu; do
  [ -x "$t" ] || { echo "peers: $t missing: build chainfd with CUDA first (scripts/setup.sh)" >&2; exit 1; }
done

# --- the peers' Python ------------------------------------------------------------------------
if [ -n "${PEERS_OFFLINE:-}" ]; then
  site=$PWD/.deps/peers-gpu-site
  if [ ! -f "$site/.done" ]; then
    rm -rf "$site" && mkdir -p "$site"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$PEERS_OFFLINE"/*.whl
    tar -xzf "$PEERS_OFFLINE/warp_lang_site.tgz" -C "$site"
    cat "$PEERS_OFFLINE"/warp.so.xz.part* | xz -d > "$site/warp/bin/warp.so"
    touch "$site/.done"
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

# --- the models: arm7 as it is, the chains written by chainfd (the same mjModel either side;
# 1000 links only as MuJoCo's binary model, past its XML reader's nesting limit, which the
# peers' MuJoCo must then read: the same version as chainfd's) ----------------------------------
args=(--model arm7=scenes/arm7.xml)
for n in 10 64 200 1000; do
  ext=xml
  [ "$n" -gt 496 ] && ext=mjb
  build/chainfd export "chain:$n,random=1,seed=1,armature=0.01" "$out/models/chain$n.$ext" >/dev/null
  args+=(--model "chain$n=$out/models/chain$n.$ext")
done

# --- chainfd, then the peers, on the same models and batches -----------------------------------
H=${PEERS_HORIZON:-64}
if [ -n "${PEERS_GPU_QUICK:-}" ]; then
  small="1,64"; large="1"; sets=("${args[@]:0:8}")
else
  small="1,64,1024,4096,16384,65536"; large="1,16,64,256"; sets=("${args[@]}")
fi
run_set() {  # $1 label, $2 batches, then --model arguments
  local label=$1 batches=$2
  shift 2
  mkdir -p "$out/chainfd_$label"
  build/bench/chainfd-bench-gpu --only peers "$@" --batches "$batches" --horizon "$H" --budget 0.1 \
    --out "$out/chainfd_$label"
  "$py" bench/peers/peers_gpu.py "$@" --batches "$batches" --horizon "$H" \
    --peers "${PEERS:-mjx32,mjx64,warp}" --what fd,step --out "$out/peers_$label.json"
}
run_set small "$small" "${sets[@]:0:8}"
if [ -z "${PEERS_GPU_QUICK:-}" ]; then
  # the 1000-link chain: chainfd only. Its binary model is MuJoCo 4.0's, which the peers'
  # MuJoCo (3.17, for MJX) cannot read, and MJCF cannot carry its depth (README.md)
  mkdir -p "$out/chainfd_large"
  build/bench/chainfd-bench-gpu --only peers "${args[@]:8}" --batches "$large" --horizon "$H" \
    --budget 0.1 --out "$out/chainfd_large"
fi
chainfd_json=("$out"/chainfd_*/bench_gpu.json)
"$py" bench/peers/table_gpu.py --chainfd "${chainfd_json[@]}" --peers "$out"/peers_*.json --out "$out"
