"""When "auto" records arrivals: pairs that thin out while native wins, every call once a delay pays."""
from types import SimpleNamespace

from stragglar_mpi.core import config as _config
from stragglar_mpi.decide import roles as _roles
from stragglar_mpi.decide.arrival import Arrival
from stragglar_mpi.decide.policy import SAMPLE_MAX

N, NBYTES = 8, 64 << 20
PRICING = (N, NBYTES, None, False, _config.read({}).model)    # one tier, not measured, the default model
QUIET = Arrival(tuple(range(N)), (0.0,) * N)
LATE = Arrival(tuple(range(N)), (0.0,) * (N - 1) + (1.0,))     # the last rank 1 s late


def tracked_calls(calls, record_for):
    state = SimpleNamespace(auto_calls=0, history=[], next_pair=1, pair_gap=1, auto_memo={})
    tracked = []
    for call in range(1, calls + 1):
        if _roles.sampled(state, PRICING):
            tracked.append(call)
            state.history.append(record_for(call))
    return tracked


def test_pairs_thin_out_while_nobody_is_late():
    tracked = tracked_calls(600, lambda call: QUIET)
    assert tracked[:9] == [1, 5, 6, 9, 10, 17, 18, 33, 34]
    starts = tracked[::2] if tracked[0] != 1 else tracked[1::2]
    gaps = {b - a for a, b in zip(starts, starts[1:])}
    assert max(gaps) == SAMPLE_MAX and len(tracked) < 600 * 2 / SAMPLE_MAX + 12


def test_a_delay_is_followed_every_call_then_sampling_starts_over():
    late_from = 300
    tracked = tracked_calls(400, lambda call: LATE if call >= late_from else QUIET)
    first_late = min(c for c in tracked if c >= late_from)
    assert first_late - late_from < SAMPLE_MAX
    assert tracked[tracked.index(first_late):] == list(range(first_late, 401))
