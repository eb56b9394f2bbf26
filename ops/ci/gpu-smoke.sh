#!/usr/bin/env bash
# The GPU check (docs/gpu.md), in one command, on a machine with an NVIDIA GPU whose python3 holds
# PyTorch with CUDA and which reaches no package registry: installs mlscope from this checkout and
# its dependencies from the wheelhouse (`make gpu-wheelhouse` builds it where pip reaches its index),
# runs the tests under tests/gpu with MLSCOPE_REQUIRE_GPU=1 (a missing GPU fails them, never skips),
# and prints one table: check, result, figure. Exits non-zero when any check did not pass.
#
#   bash ops/ci/gpu-smoke.sh            # the check (about 10 minutes at most)
#   bash ops/ci/gpu-smoke.sh --dry-run  # what it would install and check; installs and runs nothing
#
# Settings (environment): PYTHON (default python3: the interpreter with PyTorch; mlscope is installed
# into it), MLSCOPE_GPU_WHEELHOUSE (default build/gpu-wheelhouse), MLSCOPE_GPU_SMOKE_OUT (default
# build/gpu-smoke: pytest's log, its JUnit XML, the table as Markdown), MLSCOPE_GPU_SMOKE_LIMIT_S
# (default 480: the tests' share of the 10 minutes).
set -uo pipefail
cd "$(dirname "$0")/../.."

PYTHON=${PYTHON:-python3}
WHEELHOUSE=${MLSCOPE_GPU_WHEELHOUSE:-build/gpu-wheelhouse}
OUT_DIR=${MLSCOPE_GPU_SMOKE_OUT:-build/gpu-smoke}
LIMIT_S=${MLSCOPE_GPU_SMOKE_LIMIT_S:-480}
# mlscope from the checkout (editable: the tests and the CLI run the same code), and what the check
# needs beyond it; each comes from the wheelhouse unless already installed.
REQUIREMENTS=(-e . -r ops/ci/gpu-requirements.txt)
PYTEST=(-m pytest tests/gpu -v -rfEs -p no:cacheprovider -o junit_family=xunit1
        --junitxml="$OUT_DIR/junit.xml")

say() { echo "gpu-smoke: $*"; }

dry_run=0
case "${1:-}" in
  "") ;;
  --dry-run) dry_run=1 ;;
  -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "gpu-smoke: unknown argument '$1' (usage: bash ops/ci/gpu-smoke.sh [--dry-run])" >&2; exit 2 ;;
esac

wheels=()
[ -d "$WHEELHOUSE" ] && mapfile -t wheels < <(cd "$WHEELHOUSE" && ls -- *.whl 2>/dev/null)
if [ "${#wheels[@]}" -gt 0 ]; then
  wheelhouse_line="$WHEELHOUSE: ${#wheels[@]} wheels, $(du -sh "$WHEELHOUSE" | cut -f1)"
else
  wheelhouse_line="MISSING: no wheels in $WHEELHOUSE (build it with \`make gpu-wheelhouse\` on a machine \
whose pip reaches its index, and bring the folder along, or point MLSCOPE_GPU_WHEELHOUSE at it)"
fi

describe_machine() {
  say "python: $(command -v "$PYTHON" || echo "$PYTHON not found") ($("$PYTHON" -V 2>&1))"
  if command -v nvidia-smi >/dev/null 2>&1; then
    say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
  else
    say "GPU: nvidia-smi not found"
  fi
  say "PyTorch: $("$PYTHON" -c 'import torch
cuda = torch.cuda.is_available()
name = torch.cuda.get_device_name(0) if cuda else "no CUDA device"
print(f"{torch.__version__}, CUDA {torch.version.cuda}, {name}")' 2>&1 | tail -1)"
  # The TensorRT check needs it beside PyTorch (pip install tensorrt): the wheelhouse carries no CUDA.
  say "TensorRT: $("$PYTHON" -c 'import tensorrt; print(tensorrt.__version__)' 2>&1 | tail -1)"
}

if [ "$dry_run" = 1 ]; then
  say "dry run: nothing is installed and no test runs"
  describe_machine
  say "wheelhouse: $wheelhouse_line"
  say "would install: $PYTHON -m pip install --no-index --find-links $WHEELHOUSE ${REQUIREMENTS[*]}"
  if [ "${#wheels[@]}" -gt 0 ]; then
    say "  from the wheels (those already installed are kept):"
    printf '    %s\n' "${wheels[@]}"
  fi
  say "would run, MLSCOPE_REQUIRE_GPU=1, within $LIMIT_S s: $PYTHON ${PYTEST[*]}"
  say "the checks (one table row each):"
  "$PYTHON" ops/ci/gpu_report.py --list
  exit 0
fi

if [ "${#wheels[@]}" -eq 0 ]; then
  say "the wheelhouse is $wheelhouse_line" >&2
  exit 2
fi
if ! "$PYTHON" -c 'import torch' >/dev/null 2>&1; then
  say "$PYTHON cannot import torch: the check runs on the machine's own PyTorch with CUDA (set PYTHON)" >&2
  exit 2
fi
describe_machine
say "commit: $(git rev-parse --short HEAD 2>/dev/null || echo 'unknown (no git here)')"
mkdir -p "$OUT_DIR"

say "installing from $wheelhouse_line"
if ! "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-index --find-links "$WHEELHOUSE" \
    "${REQUIREMENTS[@]}"; then
  say "installing from the wheelhouse failed (above): rebuild it with \`make gpu-wheelhouse\`" >&2
  exit 2
fi
say "mlscope $("$PYTHON" -c 'import mlscope; print(mlscope.__version__, "from", mlscope.__file__)')"

say "running the checks (at most $LIMIT_S s)"
start=$SECONDS
MLSCOPE_REQUIRE_GPU=1 PYTHONUNBUFFERED=1 timeout --kill-after=20 "$LIMIT_S" "$PYTHON" "${PYTEST[@]}" \
  2>&1 | tee "$OUT_DIR/pytest.log"
tests_rc=${PIPESTATUS[0]}
if [ "$tests_rc" = 124 ] || [ "$tests_rc" = 137 ]; then
  say "the tests ran past $LIMIT_S s and were stopped: the checks not reported did not run" >&2
fi
say "tests: exit code $tests_rc after $((SECONDS - start)) s"

echo
"$PYTHON" ops/ci/gpu_report.py "$OUT_DIR/junit.xml" --markdown "$OUT_DIR/table.md"
table_rc=$?
if [ "$tests_rc" != 0 ] || [ "$table_rc" != 0 ]; then
  exit 1
fi
