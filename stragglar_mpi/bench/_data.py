"""Inputs of small integers, so the exact result is known whatever the reduction order.

Rank r's input repeats one period of ``PERIOD`` values; the expected result
repeats the element-wise reduction of every rank's period.
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

PERIOD = 7                      # prime: chunk boundaries never line up with it
BLOCK = PERIOD * (1 << 17)      # elements filled or checked per numpy call
POISON = -1                     # never a correct result: every input is >= 0
OPS = {"sum": (MPI.SUM, np.add), "prod": (MPI.PROD, np.multiply),
       "max": (MPI.MAX, np.maximum), "min": (MPI.MIN, np.minimum)}
DTYPES = ("float32", "float64", "float16", "int32", "int64")


def contribution(rank: int, opname: str, dtype) -> np.ndarray:
    """One period of ``rank``'s input."""
    j = np.arange(PERIOD)
    if opname == "prod":        # one rank in PERIOD contributes 2: products stay small
        x = np.where((j + rank) % PERIOD == 0, 2, 1)
    else:
        x = (3 * j + 5 * rank) % 11
    return x.astype(dtype)


def expected(n: int, opname: str, dtype) -> np.ndarray:
    """One period of the exact AllReduce result over ``n`` ranks."""
    rows = np.stack([contribution(r, opname, dtype) for r in range(n)])
    return OPS[opname][1].reduce(rows, axis=0).astype(dtype)


def fill(buf: np.ndarray, period: np.ndarray) -> None:
    block = np.tile(period, BLOCK // PERIOD)
    for start in range(0, buf.size, BLOCK):
        part = buf[start:start + BLOCK]
        part[:] = block[:part.size]


def count_wrong(buf: np.ndarray, period: np.ndarray) -> int:
    block = np.tile(period, BLOCK // PERIOD)
    wrong = 0
    for start in range(0, buf.size, BLOCK):
        part = buf[start:start + BLOCK]
        wrong += int(np.count_nonzero(part != block[:part.size]))
    return wrong
