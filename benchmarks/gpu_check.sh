#!/usr/bin/env bash
# The device check, for a lent GPU machine (CuPy and PyTorch for CUDA installed there), in under 8 minutes:
# the device-aware tests on "cuda" (the CUDA kernels against their NumPy twins, the decode path's graph against its
# eager kernels and the CPU's tokens), then the GPU benchmark: GPT-2 small's training step against PyTorch CUDA
# eager, each fused kernel against its composed op (values and time), generation, and nanoGPT's Shakespeare-char
# GPU configuration against PyTorch eager. Run from the root:
#     bash benchmarks/gpu_check.sh
# Everything it prints also lands in ${OUT:-.}/gpu_check.log, the tests' results in ${OUT:-.}/pytest.xml.
#
# First a preflight (versions; CuPy and the GPU must work, or the check stops there with one line: nothing after it
# could give evidence). Then each step runs under its own time limit, taken from one budget of GPU_CHECK_BUDGET_S
# seconds (460 by default: the GPU notes ask for 8 minutes at most), so a slow step cannot eat the next ones' time
# unboundedly, and a step that fails or times out does not skip the steps after it: no `set -e`. A step at its limit
# gets SIGINT first (pytest prints its summary, Python its traceback of where it stood), SIGKILL 15 s later. The
# exit status is 1 when any step failed, and the last line names them. GPU_CHECK_PYTHON overrides the interpreter
# (python3: on the lent machines the one that holds PyTorch and CuPy).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python=${GPU_CHECK_PYTHON:-python3}
out=${OUT:-.}
mkdir -p "$out" || exit 1
log="$out/gpu_check.log"
budget=${GPU_CHECK_BUDGET_S:-460}

failed=()
# step NAME MOST_S COMMAND...: run COMMAND under the smaller of MOST_S and what is left of the budget
step() {
    local name=$1 most=$2 left start rc
    shift 2
    left=$((budget - SECONDS))
    if ((left < most)); then most=$left; fi
    if ((most < 10)); then
        echo "== $name: not run, the ${budget} s budget is spent =="
        failed+=("$name (not run)")
        return
    fi
    echo "== $name (at most $most s; $SECONDS s into the check) =="
    start=$SECONDS
    timeout -s INT -k 15 "$most" "$@"
    rc=$?
    case $rc in
        0) echo "== $name: passed in $((SECONDS - start)) s ==" ;;
        124 | 137) echo "== $name: TIMED OUT after $((SECONDS - start)) s (exit $rc) ==" ;;
        *) echo "== $name: FAILED, exit $rc after $((SECONDS - start)) s ==" ;;
    esac
    ((rc == 0)) || failed+=("$name")
}

{
    echo "== gpu_check at $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown) =="
    nvidia-smi || echo "nvidia-smi: not found, or it failed"
    # versions, and CuPy seeing a GPU: without it every test on "cuda" fails one by one for minutes
    if ! timeout -k 15 90 "$python" -m benchmarks.gpu --preflight; then
        echo "gpu_check: STOPPED, the preflight failed (its message is above): nothing after it could run"
        exit 1
    fi
    # pytest-xdist is on the lent machines: 4 workers on whole files (tests/conftest.py), as CI runs them, else
    # one process (-o addopts="" drops pyproject's "-n auto" either way). A file that fails to import (numba
    # against another NumPy, say) is one error, not the end of the session: --continue-on-collection-errors.
    # faulthandler_timeout prints the stack of a test stuck for 60 s; -ra lists every skip and failure.
    tests=("$python" -m pytest --device cuda -q -p no:cacheprovider -o addopts="" --continue-on-collection-errors
           -o faulthandler_timeout=60 -ra --durations=15 --junitxml="$out/pytest.xml")
    if "$python" -c "import xdist" 2>/dev/null; then tests+=(-n auto --dist loadfile); fi
    step "tests on cuda" 200 "${tests[@]}" tests/test_devices.py tests/autograd tests/nn tests/models/test_decode.py
    # the benchmark's parts one by one, the most telling first: (1) and (3) carry the targets and the kernels'
    # values; generation's tokens are checked by tests/models/test_decode.py above
    bench=("$python" -m benchmarks.gpu --steps 5 --rounds 1 --new-tokens 64 --parts)
    step "(1) training step" 110 "${bench[@]}" train
    step "(3) fused kernels" 70 "${bench[@]}" kernels
    step "(2) generation" 100 "${bench[@]}" generate
    step "(4) Shakespeare-char" 70 "${bench[@]}" char
    nvidia-smi --query-gpu=memory.used,memory.total,temperature.gpu,clocks.sm --format=csv || true
    if ((${#failed[@]})); then
        echo "gpu_check: FAILED after $SECONDS s: $(IFS=';'; echo "${failed[*]}")"
        exit 1
    fi
    echo "gpu_check: every step passed in $SECONDS s"
} 2>&1 | tee "$log"
