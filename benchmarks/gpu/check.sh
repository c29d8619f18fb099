#!/usr/bin/env bash
# The device check (issue 60): the suite on a CUDA runner, in one call.
#
# On a bare GPU machine whose python3 already holds torch (2.11 on the lent
# machines so far: Python 3.12, pytest, pytest-xdist, hypothesis, tabulate,
# transformers; no expecttest, no registry), from the repository root:
#
#   bash benchmarks/gpu/check.sh --make-wheels   # here, once: fills .gpu-wheels/ (ignored)
#   bash benchmarks/gpu/check.sh                 # there, with .gpu-wheels carried: writes $OUT
#   bash benchmarks/gpu/check.sh --dry-run       # anywhere: every part collected, none run
#
# It installs this project's wheel and expecttest's from .gpu-wheels/ into a
# folder of its own (nothing of the machine's Python changes), then runs its
# parts side by side, each under its own time limit, within 8 minutes:
#
#   suite-cuda     the strict suite, --fsdpcheck-device cuda, serial
#   suite-auto-n8  the strict suite, --fsdpcheck-device auto, -n 8
#   users          the docs' example framework (docs/examples/mypkg) through
#                  --fsdpcheck-model on CUDA: its plan's step (FS2-9) included
#   split-cuda     the splitting checks compiled by Inductor on CUDA (SPL-10,
#                  SPL-11, SPL-17: Triton's numerics and output strides)
#   gpu-tier       the project's own tests that need CUDA (pytest -m gpu; a
#                  dry run runs them too: each skips, naming why)
#
# and prints one line per part: its exit status, time, and the cells or
# tests that failed. Under $OUT (default gpu-out/): each part's JSON report
# (<part>.json), summary.txt, and parts.tar.gz (every part's JUnit XML and
# log). Exit status: 0 when every part exited 0 (a dry run: when every part
# collected), else 1. Without a CUDA device (CUDA_VISIBLE_DEVICES= too) it
# is a dry run whatever its arguments: every part is collected, as its
# command would run it, and reported skipped, naming why.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
wheels=$root/.gpu-wheels
py=${PYTHON:-python3}

if [ "${1:-}" = "--make-wheels" ]; then
    # The GPU machine's Python (3.12) decides expecttest's wheel; the
    # project's is pure Python. No dependencies: the machine has the rest.
    rm -rf "$wheels" && mkdir -p "$wheels" || exit 1
    "$py" -m pip wheel -q --no-deps --no-build-isolation . -w "$wheels" || exit 1
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "${GPU_PYTHON:-3.12}" \
        -d "$wheels" expecttest || exit 1
    ls -1 "$wheels"
    exit 0
fi

OUT=${OUT:-$root/gpu-out}
mkdir -p "$OUT" || exit 1
work=$(mktemp -d)
dry=0
[ "${1:-}" = "--dry-run" ] && dry=1

if compgen -G "$wheels/*.whl" >/dev/null; then
    site=$work/site
    "$py" -m pip install -q --no-index --no-deps --target "$site" "$wheels"/*.whl || exit 1
    export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! "$py" -c "import pytest_fsdpcheck" 2>/dev/null; then
    echo "device check: pytest_fsdpcheck is not importable: make .gpu-wheels/ first (--make-wheels), or install it" >&2
    exit 1
fi
cuda=$("$py" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)" 2>/dev/null || echo 0)
why=""
if [ "$dry" = 1 ]; then
    why="dry run (--dry-run)"
elif [ "$cuda" = 0 ]; then
    dry=1
    why="dry run: torch sees no CUDA device (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})"
fi
torch_version=$("$py" -c "import torch; print(torch.__version__)")
echo "device check: torch $torch_version, $cuda CUDA device(s), $(nproc) cores${why:+; $why}"

# The suite runs from an empty folder (its tests are in the package); the
# users' and the gpu tier's from the checkout.
suite_dir=$work/suite
mkdir -p "$suite_dir"
suite=(-m pytest --fsdpcheck --fsdpcheck-impl torch --fsdpcheck-impl reference --fsdpcheck-strict -p no:cacheprovider)

# part name, its folder, its time limit (s), its pytest arguments
declare -a names=() dirs=() limits=() commands=()
add() { names+=("$1"); dirs+=("$2"); limits+=("$3"); commands+=("$4"); }
add suite-cuda "$suite_dir" 450 "${suite[*]} --fsdpcheck-device cuda"
add suite-auto-n8 "$suite_dir" 450 "${suite[*]} --fsdpcheck-device auto -n 8"
add users "$root" 300 "${suite[*]} --fsdpcheck-device cuda --fsdpcheck-model mypkg.models:make -k model -n 2"
add split-cuda "$suite_dir" 300 "${suite[*]} --fsdpcheck-device cuda -k test_splitting_compiled -n 2"
add gpu-tier "$root" 300 "-m pytest tests -m gpu -p no:cacheprovider -p no:randomly -rs"

pids=()
for i in "${!names[@]}"; do
    name=${names[$i]}
    read -r -a words <<<"${commands[$i]}"
    if [ "$dry" = 1 ] && [ "$name" != gpu-tier ]; then
        # collected as it would run, on the device there is: without CUDA,
        # --fsdpcheck-device cuda is the environment's error (exit 10) before
        # anything is collected
        words=("${words[@]/#cuda/auto}")
        # and without xdist: -n N only deals the same items to N workers
        kept=()
        skip=0
        for word in "${words[@]}"; do
            if [ "$skip" = 1 ]; then skip=0; continue; fi
            if [ "$word" = -n ]; then skip=1; continue; fi
            kept+=("$word")
        done
        words=("${kept[@]}" --collect-only -q)
    else
        words+=(--junitxml "$work/$name.xml")
        [ "$name" = gpu-tier ] || words+=(--fsdpcheck-report "$OUT/$name.json")
    fi
    (
        cd "${dirs[$i]}" || exit 1
        export PYTHONPATH=$root/docs/examples${PYTHONPATH:+:$PYTHONPATH}
        start=$SECONDS
        timeout "${limits[$i]}" "$py" "${words[@]}" >"$work/$name.log" 2>&1
        echo "$? $((SECONDS - start))" >"$work/$name.status"
    ) &
    pids+=($!)
done
wait "${pids[@]}"

status=0
: >"$OUT/summary.txt"
for name in "${names[@]}"; do
    read -r code seconds <"$work/$name.status"
    if [ "$dry" = 1 ] && [ "$name" != gpu-tier ]; then
        collected=$(grep -E 'tests? collected|no tests collected' "$work/$name.log" | tail -1 | tr -d '=' | xargs)
        line="part $name: skipped ($why); collected as it would run (device auto): exit $code, ${collected:-nothing collected}"
        [ "$code" = 0 ] || status=1
    else
        outcome=$(grep -E '^=+ .*(passed|failed|error|skipped|xfailed).* in [0-9.]+s' "$work/$name.log" | tail -1 | tr -d '=' | xargs)
        failed=$(grep -E '^(FAILED|ERROR) ' "$work/$name.log" | head -5 | cut -c1-160 | tr '\n' ';')
        [ "$code" = 124 ] && outcome="ran past its ${limits[$i]:-} s limit"
        line="part $name: exit $code in ${seconds} s: ${outcome:-no outcome line}${failed:+; failed: $failed}"
        [ "$code" = 0 ] || status=1
    fi
    echo "$line" | tee -a "$OUT/summary.txt"
done
(cd "$work" && tar czf "$OUT/parts.tar.gz" ./*.log $(compgen -G "*.xml") 2>/dev/null)
rm -rf "$work"
echo "device check: exit $status"
exit "$status"
