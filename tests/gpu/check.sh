#!/usr/bin/env bash
# GPU check for a machine with a real GPU, in one command (about 2-4 minutes):
#   1. every reduction kernel against MPI_Reduce_local, on small integers and, for every
#      float and complex kernel, on every pair of NaN, +-inf, +-0, +-1 and the largest finite
#      value (a NaN equals any NaN: the GPU gives the canonical one; all else bit for bit,
#      complex PROD on random values too: no product may be fused into an FMA), and the
#      kernel's throughput at 64 MiB against the device's memory bandwidth (target: 70%);
#   2. whether MPI is CUDA-aware (MPIX queries), then Allreduce of device arrays at 2, 3
#      and 4 ranks sharing GPU 0, on the staged route and (CUDA-aware MPI only) on device
#      pointers: every dtype x op in place and not, and float32 SUM from 8 B to 256 MiB
#      (StragglAR, Ring, native) with its time and #wrong.
# It uses the current Python if stragglar_mpi and numba.cuda import there; otherwise it
# makes .venv-gpu and installs the repository into it with `pip install .[cuda]`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
py="${PYTHON:-python3}"
unset NUMBA_ENABLE_CUDASIM
if ! (cd "$here" && "$py" -c "import stragglar_mpi, numba.cuda") 2>/dev/null; then
    venv="${SMPI_GPU_VENV:-$root/.venv-gpu}"
    [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q "$root[cuda]"
    py="$venv/bin/python"
fi
mpiexec="$(dirname "$(cd "$here" && "$py" -c 'import sys; print(sys.executable)')")/mpiexec"
[ -x "$mpiexec" ] || mpiexec="$(command -v mpiexec)"
export MPIR_CVAR_CH4_PROGRESS_THROTTLE=1 MPIEXEC_TIMEOUT=300 CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
cd "$here"
"$py" -m stragglar_mpi info
status=0
timeout 150 "$py" check.py kernels || status=1
for n in 2 3 4; do
    "$mpiexec" -n "$n" "$py" check.py allreduce || status=1
done
echo "GPU check: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
