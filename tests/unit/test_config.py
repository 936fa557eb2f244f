"""Settings: read once into a frozen object, every value checked, unknown names refused."""
import re
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from stragglar_mpi import configure
from stragglar_mpi.core import config as _config

SETTINGS_DOC = Path(__file__).resolve().parents[2] / "docs" / "SETTINGS.md"


def test_defaults_are_the_knobs_defaults():
    """Nothing set: every field is its knob's default, read as a set value would be."""
    s = _config.read({})
    for k in _config.KNOBS:
        assert getattr(s, k.field) == k.parse(k.name, k.default), k.name


def test_read_once_until_configure(setenv, monkeypatch):
    first = setenv(STRAGGLAR_TIMEOUT="2.5")
    assert _config.current() is first and first.timeout == 2.5
    monkeypatch.setenv("STRAGGLAR_TIMEOUT", "off")          # not read: no configure()
    assert _config.current().timeout == 2.5
    second = _config.configure()
    assert second.timeout is None and second.epoch == first.epoch + 1
    setenv(STRAGGLAR_ALGO=" Ring ")
    assert _config.algorithm("native") == "ring"
    setenv(STRAGGLAR_ALGO=None)
    assert _config.algorithm("native") == "native"
    assert _config.algorithm(None) == "auto"
    setenv(STRAGGLAR_MODEL="1e-5,1e10,1.1,2e-5,5e9")   # two tiers: nothing measured
    assert _config.current().model == (1e-5, 1e10, 1.1, 2e-5, 5e9)


def test_settings_are_frozen():
    with pytest.raises(FrozenInstanceError):
        _config.current().timeout = 1.0


@pytest.mark.parametrize("key,value", [
    ("STRAGGLAR_ALGO", "fastest"),
    ("STRAGGLAR_AUTO_MIN_BYTES", "4MiB"),
    ("STRAGGLAR_AUTO_MIN_BYTES", "-1"),
    ("STRAGGLAR_AUTO_MIN_BYTES", "1.5"),
    ("STRAGGLAR_MODEL", "1e-5,1e9"),
    ("STRAGGLAR_MODEL", "1e-5,0,1"),
    ("STRAGGLAR_MODEL", "1e-5,1e9,1.05,2e-5"),
    ("STRAGGLAR_MODEL", "1e-5,1e9,1.05,2e-5,0"),
    ("STRAGGLAR_MODEL", "1e-5,1e9,1.05,-2e-5,1e9"),
    ("STRAGGLAR_MODEL", "1e-5,-1e9,1"),
    ("STRAGGLAR_MODEL", "-1,1e9,1"),
    ("STRAGGLAR_MODEL", "1e-5,1e9,0"),
    ("STRAGGLAR_MODEL", "nan,1e9,1"),
    ("STRAGGLAR_MODEL", "1e-5,inf,1"),
    ("STRAGGLAR_TIMEOUT", "-1"),
    ("STRAGGLAR_TIMEOUT", "soon"),
    ("STRAGGLAR_TIMEOUT", "nan"),
    ("STRAGGLAR_TIMEOUT", "inf"),
    ("STRAGGLAR_VALIDATE", "2"),
    ("STRAGGLAR_VALIDATE", "yes"),
    ("STRAGGLAR_REPORT", "true"),
    ("STRAGGLAR_CUDA_AWARE", "maybe"),
    ("STRAGGLAR_CUDA_PIECE_BYTES", "0"),
    ("STRAGGLAR_CUDA_PIECE_BYTES", "-4"),
])
def test_bad_values_name_the_variable_and_what_is_accepted(setenv, key, value):
    with pytest.raises(ValueError) as info:
        setenv(**{key: value})
    text = str(info.value)
    assert key in text and repr(value) in text and "expected" in text
    for _ in range(2):                       # bad settings are not kept: every read raises
        with pytest.raises(ValueError, match=key):
            _config.current()


def test_an_unknown_name_raises(setenv):
    with pytest.raises(ValueError, match="unknown environment variable.*STRAGGLAR_TIMEOT"):
        setenv(STRAGGLAR_TIMEOT="3")


@pytest.mark.parametrize("key,value,field,want", [
    ("STRAGGLAR_AUTO_MIN_BYTES", "0", "auto_min_bytes", 0),
    ("STRAGGLAR_TIMEOUT", "0", "timeout", None),
    ("STRAGGLAR_TIMEOUT", "0.25", "timeout", 0.25),
    ("STRAGGLAR_VALIDATE", "1", "validate", True),
    ("STRAGGLAR_CUDA_AWARE", "0", "cuda_aware", False),
    ("STRAGGLAR_MODEL", "0,1e10,1", "model", (0.0, 1e10, 1.0)),
])
def test_good_values(key, value, field, want):
    assert getattr(_config.read({key: value}), field) == want


def test_a_bad_algorithm_argument_names_the_choices():
    with pytest.raises(ValueError, match="algorithm must be one of") as caught:
        _config.algorithm("fastest")
    assert "did you mean" not in str(caught.value)          # nothing is close to it
    with pytest.raises(ValueError, match="got 'stragglr'; did you mean 'stragglar'"):
        _config.algorithm("stragglr")


def test_a_bad_straggler_policy_names_the_closest():
    from stragglar_mpi.bind.args import check_straggler
    with pytest.raises(ValueError, match="got 'arival'; did you mean 'arrival'"):
        check_straggler("arival", 4)


def test_the_settings_table_is_the_knob_list():
    """Both ways: every knob's row, as ``KNOBS`` says it, in their order; and every
    variable docs/SETTINGS.md names, in its table or its text, is a knob."""
    doc = SETTINGS_DOC.read_text()
    assert _config.table() in doc
    named = set(re.findall(r"STRAGGLAR_[A-Z_]*[A-Z]", doc))
    assert named == _config.KNOWN, (sorted(named - _config.KNOWN), sorted(_config.KNOWN - named))
    rows = [line for line in doc.splitlines() if line.startswith("| `STRAGGLAR_")]
    assert len(rows) == len(_config.KNOBS), "a row of docs/SETTINGS.md that is not a knob's"


def test_configure_returns_frozen_settings_with_a_new_epoch():
    first = configure()
    second = configure()
    assert second.epoch == first.epoch + 1 and second == first
    with pytest.raises(FrozenInstanceError):
        second.timeout = 3


def test_every_algorithm_of_the_table_is_a_choice(setenv):
    """Each row of schedule/algorithms.py, and "auto", is accepted by ``algorithm=`` and
    by STRAGGLAR_ALGO, and named in that knob's meaning (docs/SETTINGS.md); a row takes
    a straggler exactly where its ``roles`` column says; no row is a schedule only."""
    from stragglar_mpi.schedule.algorithms import AUTO, SCHEDULE_ONLY, TABLE, has_roles
    meaning = next(k.meaning for k in _config.KNOBS if k.field == "algo")
    for name in [AUTO] + [row.name for row in TABLE]:
        assert _config.algorithm(name) == name
        assert f"`{name}`" in meaning, name
    for row in TABLE:
        assert has_roles(row.name) == row.roles and row.name not in SCHEDULE_ONLY, row
        setenv(STRAGGLAR_ALGO=row.name)
        assert _config.algorithm(AUTO) == _config.algorithm(None) == row.name


def test_the_exit_is_bounded_under_bad_settings(setenv):
    """STRAGGLAR_EXIT_TIMEOUT, or its one default (KNOBS) where the settings do not read."""
    assert setenv(STRAGGLAR_EXIT_TIMEOUT="5").exit_timeout == _config.exit_timeout() == 5
    with pytest.raises(ValueError):
        setenv(STRAGGLAR_TIMEOUT="soon")
    assert _config.exit_timeout() == _config.read({}).exit_timeout == 60
