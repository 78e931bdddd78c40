#!/usr/bin/env bash
# The GPU check (docs/gpu.md): Tolk's CUDA runtime (pycuda) and its Graph capability on a real GPU.
#
#   bash scripts/gpu_check.sh [--dry-run]
#
# Phases, each capped (`timeout`); the summary is rewritten after every step, so a run cut off anywhere
# leaves what it got:
#   toolchain  driver, nvcc, NVRTC and the compiler Tolk picks; warns when it is newer than the driver
#   install    (<= 2 min) pycuda's dependencies (wheels), pycuda (a wheel built earlier, else its sdist,
#              cuRAND off; the wheel goes to $OUT), Tolk from the working tree; all into $GPU_SITE
#   -- --dry-run stops here, before the first CUDA call --
#   cuda       (<= 2 min) the first CUDA call (CUDA available? smoke kernel compiled, loaded by the driver,
#              run), the CUDA tests, the conformance suite on CUDA
#   bench      (<= 2 min) the matmul and elementwise rows, the JIT replay row
#   models     (<= 1 min) the bench rows that run a model, where there are any
# The exit status is the verdict's (scripts/gpu_report.py): 0 only when every step finished in time, CUDA is
# available and no CUDA test skipped or failed (a dry run: toolchain and install passed).
#
# Environment: OUT (results; default ./gpu-out), GPU_BUNDLE (default .gpu-bundle, made by `make gpu-bundle`),
# GPU_PYTHON (default python3), GPU_SITE (install target, default /tmp/tolk-gpu-site), GPU_WORK (scratch,
# default /tmp/tolk-gpu-work), GPU_LIBCUDA_DIR (a folder with the libcuda.so pycuda links to; default searched),
# GPU_CAP_INSTALL, GPU_CAP_CUDA, GPU_CAP_BENCH, GPU_CAP_MODELS (the phase caps).
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: bash scripts/gpu_check.sh [--dry-run]" >&2; exit 2 ;;
esac
OUT=${OUT:-$ROOT/gpu-out}
BUNDLE=${GPU_BUNDLE:-$ROOT/.gpu-bundle}
PY=${GPU_PYTHON:-python3}
SITE=${GPU_SITE:-/tmp/tolk-gpu-site}
WORK=${GPU_WORK:-/tmp/tolk-gpu-work}
# phase caps in seconds (the device machine's lease is short: docs/gpu.md); GPU_CAP_<PHASE> overrides one
CAP_INSTALL=${GPU_CAP_INSTALL:-120} CAP_CUDA=${GPU_CAP_CUDA:-120} CAP_BENCH=${GPU_CAP_BENCH:-120}
CAP_MODELS=${GPU_CAP_MODELS:-60}
mkdir -p "$OUT" "$WORK"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.json
export ROOT OUT BUNDLE PY SITE WORK SUMMARY
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 XDG_CACHE_HOME=$WORK/cache

report() { "$PY" "$ROOT/scripts/gpu_report.py" --summary "$SUMMARY" "$@"; }

# phase NAME LIMIT_S: the steps that follow share LIMIT_S seconds
phase() {
  PHASE=$1
  PHASE_END=$(( $(date +%s) + $2 ))
  echo "=== phase $1 (cap $2 s) at $(date +%T)"
}

# step NAME CMD...: run CMD (a command or an exported function) in what is left of the phase's time; record
# its rc, seconds and note (the first line CMD wrote to $WORK/note, if any); return its rc
step() {
  local name=$1 left rc t0 d
  shift
  left=$(( PHASE_END - $(date +%s) ))
  echo "--- $PHASE/$name"
  rm -f "$WORK/note"
  t0=$(date +%s%N)
  if (( left <= 0 )); then
    rc=124
  else
    timeout -k 5 "$left" bash -c '"$@"' step "$@"
    rc=$?
  fi
  d=$(( $(date +%s%N) - t0 ))
  report step "$PHASE" "$name" "$rc" "$(printf '%d.%03d' $((d / 1000000000)) $(((d / 1000000) % 1000)))" \
    "$(head -n1 "$WORK/note" 2>/dev/null)"
  return "$rc"
}

# ---------------------------------------------------------------------------------------------------- install
install_deps() {
  local wheels=() w
  for w in "$BUNDLE"/*.whl; do
    case "$(basename "$w")" in pycuda-*) ;; *) [ -e "$w" ] && wheels+=("$w") ;; esac
  done
  (( ${#wheels[@]} )) || { echo "no dependency wheels in $BUNDLE (make gpu-bundle)" | tee "$WORK/note"; return 1; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}"
}

# pycuda: a wheel an earlier run built (copied into the bundle) when it installs, else one built from the sdist
install_pycuda() {
  local whl sdist built
  for whl in "$BUNDLE"/pycuda-*.whl; do
    [ -e "$whl" ] || continue
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$whl"; then
      echo "reused $(basename "$whl")" | tee "$WORK/note"
      cp "$whl" "$OUT/"
      return 0
    fi
    echo "pycuda: $(basename "$whl") does not install here; building from the sdist"
  done
  sdist=$(ls "$BUNDLE"/pycuda-*.tar.gz 2>/dev/null | head -n1)
  [ -n "$sdist" ] || { echo "no pycuda sdist or wheel in $BUNDLE (make gpu-bundle)" | tee "$WORK/note"; return 1; }
  rm -f "$OUT"/pycuda-*.whl
  # the compiler's warnings stay in the scratch folder; the log gets the tail when the build fails
  if ! "$PY" "$ROOT/scripts/gpu_build_pycuda.py" "$sdist" "$WORK/pycuda-src" "$OUT" \
    ${GPU_LIBCUDA_DIR:+--libcuda-dir "$GPU_LIBCUDA_DIR"} >"$WORK/pycuda-build.log" 2>&1; then
    tail -n 40 "$WORK/pycuda-build.log"
    echo "building $(basename "$sdist") failed" | tee "$WORK/note"
    return 1
  fi
  built=$(tail -n1 "$WORK/pycuda-build.log")
  echo "built $(basename "$built") from $(basename "$sdist")" | tee "$WORK/note"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$built"
}

install_tolk() {
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade --target "$SITE" \
    "$ROOT" "$ROOT/plugins/tolk_cpu" "$ROOT/plugins/tolk_opencl" "$ROOT/plugins/tolk_cuda"
}

# import only: pycuda.driver would load libcuda, which is the cuda phase's business
check_imports() {
  PYTHONPATH=$SITE "$PY" -c 'import mako, platformdirs, pycuda, pytools, tolk_core, tolk_cuda
print("imports: pycuda", pycuda.VERSION_TEXT, "from", pycuda.__file__)'
}

run_install() {
  phase install "$CAP_INSTALL"
  rm -rf "$SITE"
  step deps install_deps && step pycuda install_pycuda && step tolk install_tolk && step imports check_imports
}

# ---------------------------------------------------------------------------------------------------- cuda
cuda_tests() {
  cd "$ROOT" && PYTHONPATH=$SITE "$PY" -m pytest -p no:cacheprovider -q -rA -k cuda \
    --deselect tests/plugins/test_cuda.py::test_demanding_cuda_here_names_plugin_reason_and_fix \
    --junitxml "$OUT/cuda-tests.xml" tests/plugins/test_cuda.py tests/render/test_cuda.py \
    tests/engine/test_graphs.py tests/schedule/test_placements_schedule.py
}

# the stress tier is opt-in (deselected, not skipped: a skip fails the check)
conformance_cuda() {
  mkdir -p "$WORK/conformance" && cd "$WORK/conformance" && PYTHONPATH=$SITE "$PY" -m pytest -p no:cacheprovider \
    -q -rA --pyargs tolk_core.testing --tolk-device CUDA -m "not stress" --tolk-report "$OUT/conformance.json"
}

run_cuda() {
  phase cuda "$CAP_CUDA"
  PYTHONPATH=$SITE step device report device || return 1
  step tests cuda_tests
  [ -f "$OUT/cuda-tests.xml" ] && report junit cuda_tests "$OUT/cuda-tests.xml"
  step conformance conformance_cuda
  [ -f "$OUT/conformance.json" ] && report conformance "$OUT/conformance.json"
  return 0
}

# ---------------------------------------------------------------------------------------------------- bench
# bench_rows NAME PATTERN: the quick bench rows whose name holds PATTERN; their JSON is merged into bench.json
bench_rows() {
  echo "$2" >"$WORK/note"
  cd "$ROOT" && PYTHONPATH=$SITE "$PY" -m bench --device CUDA --quick --only "$2" --json "$WORK/bench-$1.json"
}

# the JIT replay row (the CUDA Graph capability under tolk_core.jit): `python -m bench` runs it only unfiltered
bench_jit() {
  cd "$ROOT" && PYTHONPATH=$SITE "$PY" -c 'import json, sys
from bench.suite import _have, jit_replay
rec = jit_replay("CUDA", 50, {"torch": _have("torch"), "tinygrad": _have("tinygrad")})
print("jitted MLP replay (ms):", {k: round(v * 1e3, 3) for k, v in rec["times"].items()}, "ok:", rec.get("ok"))
json.dump({"device": "CUDA", "results": [rec]}, open(sys.argv[1], "w"), indent=1)
sys.exit(0 if rec.get("ok", False) else 1)' "$WORK/bench-jit.json"
}

merge_bench() {
  [ -f "$WORK/bench-$1.json" ] && report bench "$WORK/bench-$1.json" "$OUT/bench.json"
}

run_bench() {
  phase bench "$CAP_BENCH"
  step matmul bench_rows matmul matmul; merge_bench matmul
  step elementwise bench_rows elementwise elementwise; merge_bench elementwise
  step jit bench_jit; merge_bench jit
  local rows i=0 name
  rows=$(PYTHONPATH=$SITE report model-rows) || rows=""
  [ -n "$rows" ] || { echo "no model rows in bench/rows.py"; return 0; }
  phase models "$CAP_MODELS"
  while IFS= read -r name; do
    i=$((i + 1))
    step "model-$i" bench_rows "model-$i" "$name"; merge_bench "model-$i"
  done <<<"$rows"
}

# ---------------------------------------------------------------------------------------------------- main
export -f report install_deps install_pycuda install_tolk check_imports cuda_tests conformance_cuda bench_rows \
  bench_jit

main() {
  echo "tolk gpu check: $( ((DRY)) && echo "dry run" || echo full) at $(date '+%F %T'); out=$OUT bundle=$BUNDLE"
  report init --dry-run "$DRY"
  phase toolchain 30
  PYTHONPATH=$ROOT:$ROOT/plugins/tolk_cuda${PYTHONPATH:+:$PYTHONPATH} step versions report toolchain
  run_install
  local installed=$?
  if ((DRY)); then
    echo "dry run: stopping before the first CUDA call"
  elif ((installed == 0)); then
    run_cuda && run_bench
  fi
  report verdict
}

# a rerun into the same $OUT starts clean (the device machine empties it anyway); a pycuda wheel stays
rm -f "$OUT"/{gpu-check.log,summary.json,cuda-tests.xml,conformance.json,bench.json}
main 2>&1 | tee "$OUT/gpu-check.log"
exit "${PIPESTATUS[0]}"
