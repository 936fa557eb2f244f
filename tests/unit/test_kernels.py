"""Device reduction kernels and CUDA plumbing, without MPI processes.

Kernels run under the Numba CUDA simulator and must agree with MPI_Reduce_local
on the host; a subprocess without the simulator compiles them to PTX for sm_90
when the CUDA compiler (NVVM) is installed, so a real GPU gets no surprise.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

if "numba.cuda" not in sys.modules:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # must precede the first numba import
cuda = pytest.importorskip("numba.cuda")

from mpi4py import MPI  # noqa: E402

from stragglar_mpi.memory import cuda as _cuda
from stragglar_mpi.memory import kernels as _kernels  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [(dt, name) for name, (_, dts) in _kernels.OPS.items() for dt in dts]
MPICH = "MPICH" in MPI.Get_library_version()
simulator_only = pytest.mark.skipif(not _cuda.simulated(), reason="kernel results are checked under the simulator")


def operands(dtype, count, seed):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, count).astype(bool)
    x = rng.integers(0, 5, count).astype(dtype)
    if dtype.kind == "c":
        x = x + 1j * rng.integers(0, 5, count).astype(dtype)
    return x


def special_values(dtype):
    """Every value a float kernel must agree on: NaN of both signs, +-inf, +-0, +-1 and the
    largest finite value (its products overflow); for complex every pair of parts from those
    (one NaN); for integers the extremes; for bool both."""
    if dtype.kind == "f":
        return np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, np.finfo(dtype).max], dtype)
    if dtype.kind == "c":
        parts = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, np.finfo(dtype).max], dtype.char.lower())
        values = np.empty(parts.size ** 2, dtype)
        values.real, values.imag = np.repeat(parts, parts.size), np.tile(parts, parts.size)
        return values
    if dtype == np.bool_:
        return np.array([False, True])
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    return np.array(sorted({low, low + 1, max(-1, low), 0, 1, 2, high - 1, high}), dtype)


def same(got, want):
    """Elementwise: bit for bit, except that a NaN equals any NaN (payload and sign free: a GPU
    gives the canonical NaN); signed zeros must agree in sign."""
    if got.dtype.kind == "c":
        return same(got.real.copy(), want.real.copy()) & same(got.imag.copy(), want.imag.copy())
    if got.dtype.kind != "f":
        return got == want
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    bits = got.view(f"u{got.itemsize}") == want.view(f"u{want.itemsize}")
    return np.where(nan_got | nan_want, nan_got & nan_want, bits)


def mpi_datatype_or_skip(dtype):
    try:
        MPI.Datatype.fromcode(np.dtype(dtype).char)
    except (KeyError, ValueError):
        pytest.skip(f"this MPI has no datatype for {np.dtype(dtype)} (Open MPI 4.1: float16)")


def on_device(a, b, opname):
    """``a (op) b`` by the kernel, checking that ``a`` is left as it was."""
    da, db = cuda.to_device(a), cuda.to_device(b)
    _kernels.reduce(da, db, opname, cuda.stream())
    assert da.copy_to_host().tobytes() == a.tobytes()
    return db.copy_to_host()


@simulator_only
@pytest.mark.parametrize("dtype,opname", PAIRS, ids=[f"{d}-{o}" for d, o in PAIRS])
def test_kernel_equals_reduce_local(dtype, opname):
    mpi_datatype_or_skip(dtype)
    a, b = operands(dtype, 40, 1), operands(dtype, 40, 2)
    want = b.copy()
    getattr(MPI, opname).Reduce_local(a, want)
    assert on_device(a, b, opname).tobytes() == want.tobytes()


@simulator_only
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("dtype,opname", PAIRS, ids=[f"{d}-{o}" for d, o in PAIRS])
def test_kernel_equals_reduce_local_on_every_pair_of_special_values(dtype, opname):
    """The same Allreduce answers alike wherever its buffers live: MPICH's answers for NaN,
    +-inf and signed zeros (its MAX keeps b only where b > a: a NaN or an equal zero in a is
    taken; its complex PROD is C's, which recovers infinities as C99 Annex G says)."""
    mpi_datatype_or_skip(dtype)
    if not MPICH and opname in ("MAX", "MIN") and dtype.kind == "f":
        pytest.skip("MPI leaves MAX/MIN of NaN and signed zeros open; the kernels give MPICH's")
    values = special_values(dtype)
    a, b = np.repeat(values, values.size), np.tile(values, values.size)
    want = b.copy()
    getattr(MPI, opname).Reduce_local(a, want)
    got = on_device(a, b, opname)
    bad = np.flatnonzero(~same(got, want))
    assert not bad.size, f"{bad.size} of {a.size} pairs differ, e.g. " + "; ".join(
        f"{a[i]!r} {opname} {b[i]!r}: {got[i]!r}, MPI {want[i]!r}" for i in bad[:4])


@simulator_only
def test_kernel_on_a_thousand_elements_and_views():
    a, b = np.arange(1000, dtype=np.float32), np.full(1000, 2, np.float32)
    raw_a, raw_b = cuda.to_device(a.view(np.uint8)), cuda.to_device(b.view(np.uint8))
    _kernels.reduce(raw_a[400:].view(np.float32), raw_b[400:].view(np.float32), "SUM", cuda.stream())
    got = raw_b.copy_to_host().view(np.float32)
    np.testing.assert_array_equal(got, np.concatenate([b[:100], a[100:] + 2]))


def test_supported_pairs():
    assert _kernels.supports(np.float16, "MAX") and _kernels.supports(np.complex128, "PROD")
    assert not _kernels.supports(np.complex64, "MAX")
    assert not _kernels.supports(np.longdouble, "SUM")
    assert _kernels.supports(np.bool_, "LXOR") and not _kernels.supports(np.bool_, "BAND")
    assert not _kernels.supports(np.float64, "BAND")
    assert _kernels.op_name(MPI.BXOR) == "BXOR" and _kernels.op_name(MPI.MAXLOC) is None


PTX = """
from numba import cuda
from stragglar_mpi.memory import kernels as _kernels
import numpy as np
for dtype, name in {pairs!r}:
    ptx, _ = cuda.compile_ptx(_kernels.make(dtype, name), _kernels.signature(np.dtype(dtype)), cc=(9, 0))
    assert ".visible .entry" in ptx
    if dtype in "FD" and name == "PROD":  # the host does not fuse; a fused product rounds once
        assert "fma." not in ptx, (dtype, name, "a product fused into an FMA")
print("compiled", len({pairs!r}))
"""


def test_kernels_compile_to_ptx_for_sm90():
    pairs = [(c, op) for c in "efd" for op in ("SUM", "PROD", "MAX", "MIN")] + \
            [(c, op) for c in "FD" for op in ("SUM", "PROD")] + \
            [("?", op) for op in ("LAND", "LOR", "LXOR")] + [("b", op) for op in ("BAND", "BOR", "BXOR")]
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(PTX.format(pairs=pairs))],
                          env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode and ("NVVM" in proc.stderr or "libnvvm" in proc.stderr.lower()):
        pytest.skip("no CUDA compiler (NVVM) installed")
    assert proc.returncode == 0, proc.stderr[-3000:]


class HostCAI:
    def __init__(self, array, readonly=False):
        self.__cuda_array_interface__ = {"version": 3, "shape": array.shape, "typestr": array.dtype.str,
                                         "data": (array.ctypes.data, readonly),
                                         "strides": None if array.flags.c_contiguous else array.strides}


class CudaDLPack:
    """Claims a CUDA device through DLPack while pointing at host memory (a fake)."""

    def __init__(self, array):
        self.array = array

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()


def test_layouts_are_read_from_cai_and_dlpack():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    cai = _cuda._from_cai(x, HostCAI(x).__cuda_array_interface__)
    dl = _cuda._from_dlpack(CudaDLPack(x))
    for desc in (cai, dl):
        assert (desc.ptr, desc.shape, desc.strides, desc.dtype) == (x.ctypes.data, x.shape, x.strides, x.dtype)
        standin = desc.standin()
        assert (standin.shape, standin.strides, standin.dtype) == (x.shape, x.strides, x.dtype)
    assert _cuda._from_dlpack(np.zeros(3)) is None  # a CPU DLPack device


def test_host_memory_behind_device_interfaces_is_host():
    x = np.zeros(8)
    if _cuda.memory_kind(x.ctypes.data) != "host":
        pytest.skip("the CUDA driver reports this memory as device memory")
    assert not _cuda.is_device(HostCAI(x)) and not _cuda.is_device(CudaDLPack(x))
    assert not _cuda.is_device(x) and not _cuda.is_device(bytearray(8))


def test_simulator_arrays_are_device_arrays():
    if not _cuda.simulated():
        pytest.skip("simulator only")
    d = cuda.to_device(np.zeros(5))
    assert _cuda.is_device(d) and _cuda.describe(d).simulated
    assert not hasattr(d, "__cuda_array_interface__")


def test_cuda_awareness_override(setenv):
    setenv(STRAGGLAR_CUDA_AWARE="1")
    assert _cuda.cuda_aware() == (True, "STRAGGLAR_CUDA_AWARE")
    setenv(STRAGGLAR_CUDA_AWARE="0")
    assert _cuda.cuda_aware() == (False, "STRAGGLAR_CUDA_AWARE")
    with pytest.raises(ValueError, match="STRAGGLAR_CUDA_AWARE"):
        setenv(STRAGGLAR_CUDA_AWARE="maybe")
    with pytest.raises(ValueError, match="STRAGGLAR_CUDA_AWARE"):
        _cuda.cuda_aware()                   # bad settings stay refused until fixed
    setenv(STRAGGLAR_CUDA_AWARE=None)
    aware, source = _cuda.cuda_aware()
    assert isinstance(aware, bool) and source


def test_piece_bytes(setenv):
    with pytest.raises(ValueError, match="STRAGGLAR_CUDA_PIECE_BYTES"):
        setenv(STRAGGLAR_CUDA_PIECE_BYTES="0")
    setenv(STRAGGLAR_CUDA_PIECE_BYTES="1024")
    assert _cuda.piece_bytes() == 1024


def test_info_names_the_data_path():
    info = _cuda.info()
    assert {"CUDA", "CUDA-aware MPI", "GPU data path"} <= set(info)
