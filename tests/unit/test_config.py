"""Settings come from the environment on every call; bad values raise, every time."""
import pytest

from stragglar_mpi import _config


def test_defaults(monkeypatch):
    for key in _config.KNOWN:
        monkeypatch.delenv(key, raising=False)
    s = _config.current()
    assert (s.algo, s.transport, s.auto_min_bytes, s.timeout, s.validate) == ("", "cython", 4194304, None, False)
    assert s.model == (1e-5, 1e9, 1.05)


def test_a_change_is_seen_by_the_next_read(monkeypatch):
    monkeypatch.setenv("STRAGGLAR_TIMEOUT", "2.5")
    assert _config.current().timeout == 2.5
    monkeypatch.setenv("STRAGGLAR_TIMEOUT", "off")
    assert _config.current().timeout is None
    monkeypatch.setenv("STRAGGLAR_ALGO", " Ring ")
    assert _config.algorithm("native") == "ring"
    monkeypatch.delenv("STRAGGLAR_ALGO")
    assert _config.algorithm("native") == "native"
    assert _config.algorithm(None) == "auto"
    monkeypatch.setenv("STRAGGLAR_MODEL", "1e-5,1e10,1.1,2e-5,5e9")   # two tiers: nothing measured
    assert _config.current().model == (1e-5, 1e10, 1.1, 2e-5, 5e9)


@pytest.mark.parametrize("key,value,match", [
    ("STRAGGLAR_ALGO", "fastest", "STRAGGLAR_ALGO"),
    ("STRAGGLAR_AUTO_MIN_BYTES", "4MiB", "STRAGGLAR_AUTO_MIN_BYTES"),
    ("STRAGGLAR_MODEL", "1e-5,1e9", "STRAGGLAR_MODEL"),
    ("STRAGGLAR_MODEL", "1e-5,1e9,1.05,2e-5", "STRAGGLAR_MODEL"),
    ("STRAGGLAR_TIMEOUT", "-1", "positive"),
    ("STRAGGLAR_TIMEOUT", "soon", "number of seconds"),
])
def test_bad_values_raise_on_every_read(monkeypatch, key, value, match):
    monkeypatch.setenv(key, value)
    for _ in range(2):                       # not hidden by the parse cache
        with pytest.raises(ValueError, match=match):
            _config.current()


def test_a_bad_algorithm_argument_names_the_choices():
    with pytest.raises(ValueError, match="algorithm must be one of"):
        _config.algorithm("fastest")
