"""Sizes, times and bandwidths from the command line: one parser for every tool.

Every flag takes the same spelling, a number and a unit (``64M``, ``3us``, ``450GB/s``);
a bare number is read in the flag's own unit, which its --help names: seconds and B/s
for ``parse_time`` / ``parse_bandwidth``, another unit with ``time_in`` / ``bandwidth_in``
(the benchmark's ms, us and GB/s, so that its scripts keep working; a straggler's delay
is in ms on every command line).  Sizes are written as ``format_size`` prints them
(``16M``: K, M and G are binary) in defaults, help and output, and as ``KiB``, ``MiB``
and ``GiB`` in code.  Errors are ``argparse.ArgumentTypeError`` so that a bad flag reads
as argparse's own.
"""
from __future__ import annotations

import argparse
import math
import re

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "K": KiB, "M": MiB, "G": GiB, "T": TiB, "KIB": KiB, "MIB": MiB, "GIB": GiB, "TIB": TiB}
_TIME_UNITS = {"": 1.0, "S": 1.0, "MS": 1e-3, "US": 1e-6, "NS": 1e-9}


def _quantity(text: str, units: dict, what: str, positive: bool = False) -> float:
    match = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([A-Za-z]*)\s*", text)
    if not match or match.group(2).upper() not in units:
        raise argparse.ArgumentTypeError(f"bad {what} {text!r}; units: {', '.join(units)}")
    try:
        value = float(match.group(1)) * units[match.group(2).upper()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad {what} {text!r}") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise argparse.ArgumentTypeError(f"{what} must be {'above' if positive else 'at least'} 0 "
                                         f"and finite, got {text!r}")
    return value


def parse_size(text) -> int:
    """Bytes from '1G', '16M', '64K', '64MiB', '4KB', '100': K, M, G, T and KiB ... are
    binary, KB, MB ... decimal.  The one size parser of every command line."""
    if isinstance(text, int):
        return text
    return int(_quantity(str(text), _SIZE_UNITS, "size", positive=True))


def format_size(nbytes: int) -> str:
    """'16M' for 16 MiB, '64K', '1G'; other counts as they are."""
    for unit in ("G", "M", "K"):
        if nbytes >= _SIZE_UNITS[unit] and nbytes % _SIZE_UNITS[unit] == 0:
            return f"{nbytes // _SIZE_UNITS[unit]}{unit}"
    return str(nbytes)


def parse_time(text: str) -> float:
    """Seconds from '3us', '1.5ms', '2s', '0'."""
    return _quantity(text, _TIME_UNITS, "time")


def time_in(unit: str):
    """The parser of a flag whose times are in ``unit`` (s, ms, us, ns): '3us', '1.5ms' or
    a bare number read in ``unit``; the value is returned in ``unit``."""
    scale = _TIME_UNITS[unit.upper()]

    def parse(text) -> float:
        return _quantity(str(text), {**_TIME_UNITS, "": scale}, "time") / scale
    parse.__name__ = f"time in {unit}"
    return parse


_BIT_UNITS = {"b": 1 / 8, "Kb": 1e3 / 8, "Mb": 1e6 / 8, "Gb": 1e9 / 8, "Tb": 1e12 / 8}


def parse_bandwidth(text: str) -> float:
    """Bytes per second from '450GiB/s', '25GB/s' or, in bits, '100Gb/s' (b = bit, B = byte)."""
    body = text.strip()
    body = body[:-2] if body.endswith("/s") else body
    match = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([kKMGT]?b)(ps)?\s*", body)
    if match:
        unit = match.group(2)
        value = _quantity(match.group(1), {"": 1}, "bandwidth", positive=True)
        return value * _BIT_UNITS[unit[0].upper() + "b" if len(unit) == 2 else unit]
    try:
        return _quantity(body, _SIZE_UNITS, "bandwidth", positive=True)
    except argparse.ArgumentTypeError as exc:
        if str(exc).startswith("bandwidth must"):
            raise
        raise argparse.ArgumentTypeError(
            f"bad bandwidth {text!r}: a number and a unit per second, e.g. 450GiB/s, 25GB/s "
            "(bytes) or 100Gb/s (bits)") from None


def bandwidth_in(unit: str):
    """The parser of a flag whose bandwidths are in ``unit`` (e.g. 'GB/s'): '450GB/s',
    '100Gb/s' or a bare number read in ``unit``; the value is returned in ``unit``."""
    scale = parse_bandwidth("1" + unit)

    def parse(text) -> float:
        body = str(text).strip()
        if re.fullmatch(r"[0-9.eE+-]+", body):
            return _quantity(body, {"": 1}, "bandwidth", positive=True)
        return parse_bandwidth(body) / scale
    parse.__name__ = f"bandwidth in {unit}"
    return parse
