#!/usr/bin/env bash
# GPU smoke test for hnbench: install from carried wheels (optional), GPU tests, CUDA/GPU-FAISS evaluation
# checked against the CPU one, a short HN-CLIP training run with AMP, exact search over 1M items; one
# summary table at the end. About 5 minutes on one H200; no internet needed.
#
#   benchmarks/gpu_smoke.sh                         # on a CUDA machine (hnbench + faiss-gpu-cu12 installed)
#   benchmarks/gpu_smoke.sh --wheels wheels/        # install first: pip install --no-index --find-links wheels/
#   benchmarks/gpu_smoke.sh --cpu                   # dry run of every step on the CPU, small sizes (CI)
#   benchmarks/gpu_smoke.sh --help                  # all options (benchmarks/gpu_smoke.py)
#
# PYTHON selects the interpreter (default: python3 on PATH). Exit status 0 when no step failed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${PYTHON:-python3}" "$here/gpu_smoke.py" "$@"
