"""The straggler report prices "saved" with STRAGGLAR_MODEL on one node, whichever of its
two accepted forms (three values, or five with the tier between nodes) is set."""
from types import SimpleNamespace

import pytest

from stragglar_mpi.call.report import Log, render
from stragglar_mpi.core import config


@pytest.mark.parametrize("model", ["1e-5,1e9,1.05", "1e-5,1e9,1.05,2e-5,1e8"])
def test_report_with_either_form_of_the_model(model):
    try:
        config.configure({"STRAGGLAR_MODEL": model})
        log = Log(3, "test")
        record = SimpleNamespace(last=2, gap=0.25)
        log.calls.append((record, "stragglar", 2, 8 << 20, 0.004))
        text = render(log, 3, "test")
    finally:
        config.configure({})
    assert "1 recorded calls" in text, text
    assert "STRAGGLAR_MODEL: alpha 1e-05 s, bandwidth 1e+09 B/s" in text, text
    row = [ln for ln in text.splitlines() if ln.split()[:1] == ["2"]]
    assert row and row[0].split()[1] == "1", text            # rank 2 was last once


def test_the_bench_header_names_every_host():
    from stragglar_mpi.bench._sweep import _where
    assert _where({"host": "n1", "ranks": 8, "hosts": {"n1": 4, "n2": 4}}) == "2 hosts: n1 (4), n2 (4)"
    assert _where({"host": "vm", "ranks": 2, "hosts": {"vm": 2}}) == "vm"
    assert _where({"host": "vm", "ranks": 2}) == "vm"            # a JSON file from before
