#!/usr/bin/env bash
# The one script to run on a GPU machine for issue #19 (the CUDA backend), from the repo root:
#
#     OUT=/some/empty/dir bash tools/gpu_check.sh
#
# Stages, each under `timeout` and independent of the others (a failure or a timeout only
# ends its own stage); the default limits (30 + 90 + 40 + 60 + 210 + 150 s) end it within
# ~10 minutes (a run takes about 5):
#   1. versions   nvidia-smi, driver/CUDA/cupy/torch/numpy versions, what tfc's cuda
#                 backend finds (-> $OUT/versions.txt)
#   2. cuda tests TFC_BACKEND=cuda pytest tests/backends/cuda -x (-> $OUT/cuda_tests.log)
#                 (-n 8 and --timeout as in 4)
#   2b. gpu checks tools/gpu_feed_check.py (-> $OUT/gpu_checks.txt): f16 products against
#                 the exact product (f16 ulps, next to widen-then-round and cupy's f16),
#                 the prepared f32 gemm against cupy.matmul, the random kernels' bits,
#                 host feeds through pinned staging, /gpu:N placement
#   2c. state checks tools/gpu_state_check.py then tools/gpu_grad_check.py
#                 (-> $OUT/state_checks.txt): device->host copies per step (Program,
#                 Session, a cpu/gpu executor), CUDA graphs with and without, strided feeds;
#                 every MLP gradient's distance from f64 exact on cuda and llvm
#   3. bench      tools/bench_cuda.py --json $OUT/bench.json (-> $OUT/bench.log); the JSON is
#                 rewritten after every row, so a timeout keeps what was measured
#   4. suite      TFC_BACKEND=cuda pytest (the whole suite; -n 8 with pytest-xdist,
#                 --timeout with pytest-timeout, where installed) (-> $OUT/suite.log)
# and $OUT/summary.txt: each stage's exit status and time, the tests' counts, failures and
# skip reasons, the benchmark goals. Eight files in $OUT in all.
#
# The machine has no network: wheels tfc needs that are not installed there (lark, ...)
# are carried in .whl/ and installed with pip --no-index into /tmp/site first.
# Limits (seconds) can be changed: T_VERSIONS, T_CUDA_TESTS, T_CHECKS, T_STATE, T_BENCH, T_SUITE; BENCH_ARGS
# adds arguments to bench_cuda.py (e.g. "--quick" or "--no-torch-compile"); SKIP_STAGES
# names stages not to run (e.g. "suite").
# Without a GPU (to try the script) the cuda stages report the no-device skip or error.

set -u
cd "$(dirname "$0")/.." || exit 1
: "${OUT:?set OUT to the folder the results go to}"
mkdir -p "$OUT"
T_VERSIONS=${T_VERSIONS:-30}
T_CUDA_TESTS=${T_CUDA_TESTS:-90}
T_CHECKS=${T_CHECKS:-40}
T_STATE=${T_STATE:-60}
T_BENCH=${T_BENCH:-210}
T_SUITE=${T_SUITE:-150}
BENCH_ARGS=${BENCH_ARGS:-}
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
PY=${PYTHON:-python3}

note() { echo "$*" | tee -a "$SUMMARY"; }

# stage NAME LIMIT LOG CMD...: run CMD under `timeout`, output to LOG, status to the summary.
stage() {
    local name=$1 limit=$2 log=$3
    shift 3
    case " ${SKIP_STAGES:-} " in
        *" $name "*) note "stage $name: skipped (SKIP_STAGES)"; : > "$log"; return 0 ;;
    esac
    local t0 rc
    t0=$(date +%s)
    timeout -k 15 "$limit" "$@" > "$log" 2>&1
    rc=$?
    local how="rc=$rc"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then how="TIMED OUT after $limit s (rc=$rc)"; fi
    note "stage $name: $how, $(( $(date +%s) - t0 )) s"
    return 0
}

# pytest_result LOG: the counts line and the first failures and skip reasons, into the summary.
pytest_result() {
    grep -E "^(FAILED|ERROR|SKIPPED) " "$1" | head -n 25 | cut -c1-300 | sed 's/^/  /' \
        | tee -a "$SUMMARY"
    grep -E "[0-9]+ (passed|failed|skipped|errors?|deselected)" "$1" | tail -n 1 \
        | sed 's/^/  /' | tee -a "$SUMMARY"
}

START=$(date +%s)
note "gpu_check.sh started $(date -u +%FT%TZ) in $PWD"

if compgen -G ".whl/*.whl" > /dev/null; then
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
            >> "$SUMMARY" 2>&1; then
        note "installed $(ls .whl/*.whl | wc -l) wheel(s) from .whl/ into /tmp/site"
    else
        note "pip install of .whl/*.whl failed (see above)"
    fi
fi
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TFC_CACHE_DIR=${TFC_CACHE_DIR:-/tmp/tfc-gpu-check-cache}
export PYTHONDONTWRITEBYTECODE=1

# ---- 1. versions ------------------------------------------------------------------------
versions() {
    echo "== nvidia-smi"; nvidia-smi 2>&1
    echo "== nvidia-smi --query-gpu"
    nvidia-smi --format=csv 2>&1 \
        --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit
    echo "== nvcc"; nvcc --version 2>&1 | tail -2
    echo "== g++"; g++ --version 2>&1 | head -1
    echo "== git"; git rev-parse HEAD 2>&1; git log --oneline -3 2>&1
    echo "== python"
    "$PY" - <<'EOF' 2>&1
import importlib, platform, sys
print("python", sys.version.split()[0], platform.machine())
for name in ("numpy", "llvmlite", "lark", "cupy", "torch", "pytest", "xdist", "pytest_timeout",
             "hypothesis"):
    try:
        m = importlib.import_module(name)
        print(f"{name} {getattr(m, '__version__', '?')}")
    except Exception as e:
        print(f"{name}: not importable ({type(e).__name__}: {e})")
try:
    import cupy
    rt = cupy.cuda.runtime
    dev = cupy.cuda.Device()
    p = rt.getDeviceProperties(dev.id)
    print("cupy device:", p["name"], "cc", dev.compute_capability, "SMs",
          p["multiProcessorCount"], "driver", rt.driverGetVersion(), "runtime",
          rt.runtimeGetVersion(), "nvrtc", cupy.cuda.nvrtc.getVersion())
except Exception as e:
    print(f"cupy device: {type(e).__name__}: {e}")
try:
    import torch
    print("torch cuda:", torch.version.cuda, torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
except Exception as e:
    print(f"torch cuda: {type(e).__name__}: {e}")
try:
    import tfc
    print("tfc", tfc.__version__, tfc.__file__)
    from tfc.backends.cuda import device
    print("tfc cuda device:", device.cuda_device())
except Exception as e:
    print(f"tfc cuda device: {type(e).__name__}: {e}")
try:
    from tfc.backends.cuda import nvrtc
    print("tfc nvrtc available:", nvrtc.available())
except Exception as e:
    print(f"tfc nvrtc: {type(e).__name__}: {e}")
EOF
}
stage versions "$T_VERSIONS" "$OUT/versions.txt" bash -c "$(declare -f versions); PY=$PY versions"
grep -E "^(cupy device|torch cuda|tfc cuda device|tfc nvrtc):" "$OUT/versions.txt" \
    | sed 's/^/  /' | tee -a "$SUMMARY"

# pytest plugins that may be missing on the machine: use them only where they import
XDIST=()
if "$PY" -c "import xdist" 2>/dev/null; then XDIST=(-n 8); fi
PTIMEOUT=()
if "$PY" -c "import pytest_timeout" 2>/dev/null; then PTIMEOUT=(--timeout 120); fi
note "pytest options: ${XDIST[*]:-no xdist} ${PTIMEOUT[*]:-no pytest-timeout}"

# ---- 2. the cuda backend's own tests -----------------------------------------------------
stage cuda_tests "$T_CUDA_TESTS" "$OUT/cuda_tests.log" \
    env TFC_BACKEND=cuda "$PY" -m pytest tests/backends/cuda -x -rfEs -p no:cacheprovider \
    "${XDIST[@]}" "${PTIMEOUT[@]}"
pytest_result "$OUT/cuda_tests.log"

# ---- 2b. products, random kernels, feeds, placement on the GPU ---------------------------
stage gpu_checks "$T_CHECKS" "$OUT/gpu_checks.txt" "$PY" tools/gpu_feed_check.py
grep -E "^(OK|FAIL) " "$OUT/gpu_checks.txt" | cut -c1-400 | sed 's/^/  /' | tee -a "$SUMMARY"

# ---- 2c. variables on the device, CUDA graphs, gradients against f64 ----------------------
stage state_checks "$T_STATE" "$OUT/state_checks.txt" \
    bash -c "'$PY' tools/gpu_state_check.py; '$PY' tools/gpu_grad_check.py"
grep -E "^(OK|FAIL) " "$OUT/state_checks.txt" | cut -c1-400 | sed 's/^/  /' | tee -a "$SUMMARY"

# ---- 3. the GPU benchmarks ---------------------------------------------------------------
# shellcheck disable=SC2086  # BENCH_ARGS is a list of words on purpose
stage bench "$T_BENCH" "$OUT/bench.log" \
    "$PY" tools/bench_cuda.py --json "$OUT/bench.json" --runs 20 --row-budget 3 $BENCH_ARGS
if grep -q "^goals" "$OUT/bench.log"; then
    sed -n '/^goals/,$p' "$OUT/bench.log" | sed 's/^/  /' | tee -a "$SUMMARY"
else
    tail -n 3 "$OUT/bench.log" | sed 's/^/  /' | tee -a "$SUMMARY"
fi

# ---- 4. the whole suite in cuda mode -----------------------------------------------------
stage suite "$T_SUITE" "$OUT/suite.log" \
    env TFC_BACKEND=cuda "$PY" -m pytest -rfEs -p no:cacheprovider --maxfail 100 \
    "${XDIST[@]}" "${PTIMEOUT[@]}"
pytest_result "$OUT/suite.log"

note "gpu_check.sh done in $(( $(date +%s) - START )) s"
