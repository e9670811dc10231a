#!/bin/sh
# Run a GPU bundle built beforehand by bench/gpu_prepare.py (no compiler needed here: only
# python3 with numpy, and the NVIDIA driver's libcuda.so.1; torch optional).
#   sh bench/gpu_check.sh [BUNDLE] [--repeats N]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bundle=${1:-$here/results/gpu_bundle}
[ $# -gt 0 ] && shift
exec python3 "$here/gpu_check.py" "$bundle" "$@"
