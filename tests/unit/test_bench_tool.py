"""The benchmark tool's pure parts (no MPI processes): exact expected values, flags."""
import argparse

import numpy as np
import pytest

from stragglar_mpi.bench import _args, _data


def test_wrong_results_are_counted():
    period = _data.expected(5, "sum", np.float32)
    buf = np.empty(3 * _data.BLOCK + 11, np.float32)
    _data.fill(buf, period)
    assert _data.count_wrong(buf, period) == 0
    buf[[0, _data.BLOCK + 3, buf.size - 1]] = _data.POISON
    assert _data.count_wrong(buf, period) == 3


@pytest.mark.parametrize("op", sorted(_data.OPS))
@pytest.mark.parametrize("dtype", _data.DTYPES)
def test_expected_is_exact(op, dtype):
    rows = [_data.contribution(r, op, dtype).astype(np.float64) for r in range(16)]
    exact = _data.OPS[op][1].reduce(np.stack(rows), axis=0)
    assert np.array_equal(_data.expected(16, op, dtype).astype(np.float64), exact)


def test_flags_parse():
    assert [_args.parse_size(s) for s in ("8", "64K", "256M", "1G", "2MiB")] == \
        [8, 65536, 256 << 20, 1 << 30, 2 << 20]
    rng = np.random.default_rng(0)
    assert _args.parse_delay("200").draw(rng, 0) == 0.2
    assert _args.Delay("fixed", 10, per_mib=2).draw(rng, 4 << 20) == pytest.approx(0.018)
    assert 0.1 <= _args.parse_delay("uniform:100:300").draw(rng, 0) <= 0.3
    for bad in ("-1", "uniform:1", "gauss:3", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a delay"):
            _args.parse_delay(bad)
    args = _args.parser().parse_args(["-b", "1M", "-e", "256M", "-n", "20", "--min-iters", "5",
                                     "--shrink-above", "64M"])
    assert len(_args.sizes(args)) == 9
    assert [_args.iterations(args, s << 20) for s in (64, 128, 256)] == [20, 10, 5]


def test_flags_take_the_schedule_tools_units_and_bare_numbers_in_their_own():
    """One parser (schedule/units.py): 30ms is 30, 0.003ms is 3 us, 25GB/s is 25."""
    assert _args.parse_delay("30ms") == _args.parse_delay("30") == _args.parse_delay("0.03s")
    assert _args.parse_delay("uniform:0.1s:300ms") == _args.parse_delay("uniform:100:300")
    bare = _args.parser().parse_args(["--alpha", "3", "--bandwidth", "25", "--delay-per-mib", "2"])
    units = _args.parser().parse_args(["--alpha", "3us", "--bandwidth", "25GB/s", "--delay-per-mib", "2ms"])
    assert (bare.alpha, bare.bandwidth, bare.delay_per_mib) == (3.0, 25.0, 2.0)
    assert (units.alpha, units.bandwidth, units.delay_per_mib) == pytest.approx((3.0, 25.0, 2.0))
    assert _args.parser().parse_args(["--bandwidth", "100Gb/s"]).bandwidth == pytest.approx(12.5)
