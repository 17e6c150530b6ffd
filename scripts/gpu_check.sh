#!/usr/bin/env bash
# The GPU checks of a change, for a machine with a CUDA device: the GPU tests, the sanitizers on
# test_gpu (its quick mode) and chainfd_step's benchmark, each under a time limit, so that a
# kernel that hangs costs one step's limit rather than the whole session's device time.
#   scripts/gpu_check.sh BUILD_DIR OUT_DIR [tests] [memcheck] [racecheck] [synccheck] [bench]
# (no step named: all). Each step's output goes to OUT_DIR/<step>.txt; the summary lines are
# printed at the end. LIMIT (seconds, default 240) bounds each step. CHAINFD_TEST_ONLY=scan (or
# another part test_gpu names) limits the sanitizers to that part.
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR OUT_DIR [tests] [memcheck] [racecheck] [synccheck] [bench]" >&2
  exit 2
fi
build="$(cd "$1" && pwd)"
mkdir -p "$2"
out="$(cd "$2" && pwd)"
shift 2
steps="${*:-tests memcheck racecheck synccheck bench}"
limit="${LIMIT:-240}"
cd "$build"
mkdir -p viewer examples  # ctest's working directories, absent from a carried test tree

has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
run() {  # step, command...: the command under the limit, its output to OUT_DIR/step.txt
  local step="$1"; shift
  timeout "$limit" "$@" >"$out/$step.txt" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && echo "$step: TIMED OUT after $limit s" >>"$out/$step.txt"
  return $rc
}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/device.txt" 2>&1 || true
has tests && run tests ctest -L gpu --output-on-failure --timeout "$limit"
sanitize() {  # tool
  if ! command -v compute-sanitizer >/dev/null 2>&1; then
    echo "$1: compute-sanitizer not found" >"$out/$1.txt"
    return
  fi
  CHAINFD_TEST_QUICK=1 run "$1" compute-sanitizer --tool "$1" --report-api-errors no ./tests/test_gpu
}
for tool in memcheck racecheck synccheck; do has "$tool" && sanitize "$tool"; done
has bench && run bench_step ./bench/chainfd-bench-step --steps 20

echo "device: $(cat "$out/device.txt")"
for f in "$out"/*.txt; do
  case "$(basename "$f")" in device.txt) continue ;; esac
  echo "== $(basename "$f" .txt)"
  grep -E "tests passed|Skipped|ERROR SUMMARY|RACECHECK SUMMARY|all checks passed|FAILED|TIMED OUT|not found" "$f" | head -8
done
