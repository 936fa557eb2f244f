"""GPU check on a machine with a real GPU (run through check.sh).

    python check.py kernels          every kernel against MPI_Reduce_local, on small integers and
                                     on NaN, +-inf and signed zeros; throughput at 64 MiB
    mpiexec -n N python check.py allreduce    Allreduce on one shared GPU: CUDA-aware detection,
                                              every dtype x op, 8 B .. 256 MiB, on every route

Inputs are small integers, so every result is exact in any order, except in the kernels'
check of special values, where a NaN equals any NaN and everything else must be bit for bit.
"""
import os
import sys
import time

import numpy as np
from mpi4py import MPI  # first: initializes MPI

from numba import cuda

import stragglar_mpi
from stragglar_mpi import Allreduce
from stragglar_mpi.memory import cuda as _cuda
from stragglar_mpi.memory import kernels as _kernels

INTS, FLOATS, COMPLEX = "bBhHiIlLqQ", "efd", "FD"
CASES = ([(c, op) for c in INTS + FLOATS for op in ("SUM", "PROD", "MAX", "MIN")]
         + [(c, op) for c in COMPLEX for op in ("SUM", "PROD")]
         + [(c, op) for c in INTS for op in ("BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR")]
         + [("?", op) for op in ("LAND", "LOR", "LXOR")])
TARGET = 0.70
MIB64 = 64 << 20


def contribution(rank, size, count, code, opname):
    i = np.arange(count)
    if opname == "PROD":  # one rank contributes 2 at each index
        x = np.where((i + rank) % size == 0, 2, 1)
    elif opname in ("LAND", "LOR", "LXOR"):
        x = ((i * 7 + rank * 3) % 5 < 3).astype(int)
    elif opname in ("BAND", "BOR", "BXOR"):
        x = (i * 5 + rank * 11) % 64
    else:
        x = (i * 3 + rank * 7) % 13 + (rank == size - 1)
    x = x.astype(np.dtype(code))
    return x + 1j * x.real.astype(x.dtype) if code in COMPLEX else x


def expected(size, count, code, opname):
    acc = contribution(0, size, count, code, opname)
    for r in range(1, size):
        getattr(MPI, opname).Reduce_local(contribution(r, size, count, code, opname), acc)
    return acc


def peak_bandwidth():
    """Theoretical DRAM bandwidth (bytes/s) from the device attributes, or None."""
    dev = cuda.get_current_device()
    try:
        return 2 * dev.MEMORY_CLOCK_RATE * 1e3 * dev.GLOBAL_MEMORY_BUS_WIDTH / 8
    except Exception:  # noqa: BLE001 - an attribute some drivers do not report
        return None


def timed(launch, repeat=50):
    """Median seconds of ``launch`` (on the default stream), timed with CUDA events."""
    for _ in range(3):
        launch()
    times = []
    for _ in range(repeat):
        start, end = cuda.event(), cuda.event()
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return float(np.median(times))


def check_kernels():
    wrong = 0
    for dtype, opname in [(d, o) for o, (_, ds) in _kernels.OPS.items() for d in ds]:
        a, b = contribution(1, 3, 4099, dtype.char, opname), contribution(2, 3, 4099, dtype.char, opname)
        want = b.copy()
        getattr(MPI, opname).Reduce_local(a, want)
        da, db = cuda.to_device(a), cuda.to_device(b)
        _kernels.reduce(da, db, opname, 0)
        if db.copy_to_host().tobytes() != want.tobytes():
            wrong += 1
            print(f"WRONG kernel {opname} {dtype}")
    print(f"kernels: {len(_kernels.OPS)} ops, every dtype: #wrong {wrong}")
    return wrong == 0


def special_values(code):
    """NaN of both signs, +-inf, +-0, +-1 and the largest finite value; complex: every pair of
    such parts (one NaN), as tests/unit/test_kernels.py checks them under the simulator."""
    parts = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, np.finfo(code).max]
    if code not in COMPLEX:
        return np.array(parts, code)
    real = np.array(parts[1:], code.lower())
    values = np.empty(real.size ** 2, code)
    values.real, values.imag = np.repeat(real, real.size), np.tile(real, real.size)
    return values


def same(got, want):
    """Elementwise: bit for bit, except that a NaN equals any NaN (the GPU gives the canonical
    NaN where MPICH keeps an operand's sign and payload)."""
    if got.dtype.kind == "c":
        return same(got.real.copy(), want.real.copy()) & same(got.imag.copy(), want.imag.copy())
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    bits = got.view(f"u{got.itemsize}") == want.view(f"u{want.itemsize}")
    return np.where(nan_got | nan_want, nan_got & nan_want, bits)


def ulps(got, want):
    """The largest difference in units in the last place, over finite parts."""
    got, want = got.view(got.real.dtype), want.view(want.real.dtype)
    finite = np.isfinite(got) & np.isfinite(want)
    return float(np.max(np.abs(got - want)[finite] / np.spacing(np.abs(want[finite])), initial=0))


def check_special_values():
    """Every float and complex kernel on every pair of special values against MPI_Reduce_local,
    and complex PROD on random finite values, with no tolerance: the kernels fuse no product
    into an FMA (a fused one is off by an ulp or so, which the report shows)."""
    mpich = "MPICH" in MPI.Get_library_version()
    wrong, pairs = 0, 0
    cases = [(c, op) for c in FLOATS for op in ("SUM", "PROD", "MAX", "MIN")] + \
            [(c, op) for c in COMPLEX for op in ("SUM", "PROD")]
    for code, opname in cases:
        if not mpich and opname in ("MAX", "MIN"):
            continue  # MPI leaves MAX/MIN of NaN and signed zeros open; the kernels give MPICH's
        values = special_values(code)
        a, b = np.repeat(values, values.size), np.tile(values, values.size)
        if code in COMPLEX and opname == "PROD":
            rng = np.random.default_rng(5)
            a, b = (np.concatenate([x, (rng.standard_normal((4099, 2)) * 1e3).astype(code.lower())
                                    .view(code).ravel()]) for x in (a, b))
        want = b.copy()
        getattr(MPI, opname).Reduce_local(a, want)
        db = cuda.to_device(b)
        _kernels.reduce(cuda.to_device(a), db, opname, 0)
        got = db.copy_to_host()
        bad = np.flatnonzero(~same(got, want))
        pairs += a.size
        if bad.size:
            wrong += 1
            off = ulps(got[bad], want[bad])
            print(f"WRONG kernel {opname} {np.dtype(code)} on {bad.size} of {a.size} pairs"
                  + (f" (finite parts up to {off:.0f} ulp off: a product fused into an FMA?)" if off else "")
                  + ", e.g. " + "; ".join(f"{a[i]} {opname} {b[i]} = {got[i]}, MPI {want[i]}" for i in bad[:3]))
    print(f"kernels on NaN, +-inf, +-0, +-1, the largest finite value (complex PROD: and random): "
          f"{len(cases)} dtype x op, {pairs} pairs{'' if mpich else ', MAX/MIN skipped (not MPICH)'}; "
          f"#wrong {wrong}")
    return wrong == 0


def throughput():
    dev = cuda.get_current_device()
    peak = peak_bandwidth()
    print(f"device: {dev.name}; theoretical memory bandwidth "
          + (f"{peak / 1e9:.0f} GB/s" if peak else "unknown"))
    a = cuda.to_device(np.ones(MIB64, np.uint8))
    b = cuda.to_device(np.ones(MIB64, np.uint8))
    copy = 2 * MIB64 / timed(lambda: b.copy_to_device(a))
    print(f"device-to-device copy, 64 MiB: {copy / 1e9:.0f} GB/s")
    ok = True
    for code in ("f", "e", "d", "b"):
        va, vb = a.view(np.dtype(code)), b.view(np.dtype(code))
        _kernels.reduce(va, vb, "SUM", 0)  # compile outside the timing
        seconds = timed(lambda: _kernels.reduce(va, vb, "SUM", 0))
        rate = 3 * MIB64 / seconds  # read a, read b, write b
        ref = peak or copy
        share = rate / ref
        print(f"reduction kernel SUM {np.dtype(code).name:8s} 64 MiB: {seconds * 1e6:8.1f} us "
              f"{rate / 1e9:6.0f} GB/s = {share:5.1%} of {'peak' if peak else 'copy'} bandwidth")
        if code == "f":
            ok = share >= TARGET
    print(f"target: float32 SUM at >= {TARGET:.0%} of the memory bandwidth: {'PASS' if ok else 'FAIL'}")
    return ok


def routes():
    """The routes this machine can run: staged always, device pointers where MPI is CUDA-aware."""
    aware, source = _cuda._query_mpi()
    return (["staged", "device"] if aware else ["staged"]), f"CUDA-aware MPI: {'yes' if aware else 'no'} ({source})"


def _use(route, piece_bytes=None):
    os.environ["STRAGGLAR_CUDA_AWARE"] = "1" if route == "device" else "0"
    if piece_bytes:
        os.environ["STRAGGLAR_CUDA_PIECE_BYTES"] = str(piece_bytes)
    stragglar_mpi.configure()                 # settings are read once; read them again


SIZES = [8 << (2 * k) for k in range(14)] + [256 << 20]   # 8 B .. 128 MiB by 4, then 256 MiB


def check_allreduce():
    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    available, detected = routes()
    if rank == 0:
        print(detected)
    wrong = 0
    for route in available:
        _use(route)
        for code, opname in CASES:
            for count in (n + 5, 1001):
                for in_place in (False, True):
                    wrong += not _one(comm, code, opname, count, in_place, "stragglar")
        wrong += _sweep(comm, route)
    wrong = comm.allreduce(wrong)
    if rank == 0:
        print(f"Allreduce on {n} ranks sharing one GPU, routes {', '.join(available)}: "
              f"{len(CASES)} dtype x op cases in place and not, sizes 8 B .. 256 MiB; #wrong {wrong}")
    return wrong == 0


def _sweep(comm, route):
    """float32 SUM from 8 B to 256 MiB, StragglAR, Ring and native: time and #wrong per size."""
    rank, wrong = comm.Get_rank(), 0
    if rank == 0:
        print(f"route {route}: {'bytes':>10} {'algorithm':>10} {'ms':>9} {'#wrong':>7}")
    for nbytes in SIZES:
        for algorithm in ("stragglar", "ring", "native"):
            count = nbytes // 4
            comm.Barrier()
            t = time.perf_counter()
            ok = _one(comm, "f", "SUM", count, False, algorithm)
            seconds = comm.allreduce(time.perf_counter() - t, op=MPI.MAX)
            bad = comm.allreduce(int(not ok))
            wrong += not ok
            if rank == 0:
                memory = stragglar_mpi.stats(comm)["last"].get("memory")
                print(f"route {route}: {nbytes:>10} {algorithm:>10} {seconds * 1e3:>9.2f} {bad:>7}  ({memory})")
    return wrong


def _one(comm, code, opname, count, in_place, algorithm):
    n, rank = comm.Get_size(), comm.Get_rank()
    send = cuda.to_device(contribution(rank, n, count, code, opname))
    out = send if in_place else cuda.device_array(count, np.dtype(code))
    Allreduce(comm, MPI.IN_PLACE if in_place else send, out, getattr(MPI, opname), algorithm=algorithm)
    got, want = out.copy_to_host(), expected(n, count, code, opname)
    if not np.array_equal(got, want):
        print(f"rank {rank}: WRONG {code} {opname} count={count} in_place={in_place} {algorithm}")
        return False
    return True


def main(argv):
    if _cuda.simulated() or not cuda.is_available():
        print("check.py needs a real GPU (and NUMBA_ENABLE_CUDASIM unset)")
        return 2
    if argv[1:] == ["kernels"]:
        ok = check_kernels()
        ok = check_special_values() and ok
        return 0 if throughput() and ok else 1
    if argv[1:] == ["allreduce"]:
        return 0 if check_allreduce() else 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
