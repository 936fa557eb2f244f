"""Every command line refuses bad input with an argparse error (exit 2, no traceback),
and every command takes --help."""
import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = [sys.executable, "-m", "stragglar_mpi.schedule"]


def run(cmd, cwd=None):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


@pytest.mark.parametrize("args, words", [
    (["show", "--n", "0"], "at least 2"),
    (["show", "--n", "-3"], "at least 2"),
    (["show", "--n", "4", "--straggler", "7"], "not a rank of n=4"),
    (["show", "--n", "5..3"], "empty range"),
    (["verify", "--n", "5..3"], "empty range"),
    (["simulate", "--n", "4", "--bandwidth", "0"], "above 0"),
    (["simulate", "--n", "4", "--size", "-1GiB"], "size"),
    (["simulate", "--n", "4", "--bandwidth", "fast"], "bad bandwidth"),
    (["search", "--n", "5", "--tries", "0"], "at least 1"),
])
def test_schedule_refuses(args, words):
    proc = run(SCHEDULE + args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert words in proc.stderr and "Traceback" not in proc.stderr


def test_bandwidth_units_bits_and_bytes():
    from stragglar_mpi.schedule.__main__ import parse_bandwidth
    assert parse_bandwidth("10Gb/s") == 1.25e9          # gigabits
    assert parse_bandwidth("10GB/s") == 1e10            # gigabytes
    assert parse_bandwidth("10GiB/s") == 10 * 2**30
    assert parse_bandwidth("100Gbps") == 12.5e9


@pytest.mark.parametrize("module", ["stragglar_mpi", "stragglar_mpi.schedule", "stragglar_mpi.bench.demo",
                                    "stragglar_mpi.bench", "stragglar_mpi.bench.rounds"])
def test_help(module):
    proc = run([sys.executable, "-m", module, "--help"])
    assert proc.returncode == 0 and "usage" in proc.stdout.lower(), proc.stderr


@pytest.mark.parametrize("command", ["show", "verify", "simulate", "search"])
def test_schedule_subcommand_help(command):
    proc = run(SCHEDULE + [command, "--help"])
    assert proc.returncode == 0 and "usage" in proc.stdout


@pytest.mark.parametrize("cmd, words", [
    ([sys.executable, "-m", "stragglar_mpi.bench.demo", "--iters", "0"], "--iters must be at least 1"),
    ([sys.executable, str(ROOT / "examples" / "train_mlp.py"), "--steps", "0"], "at least 1"),
    ([sys.executable, str(ROOT / "examples" / "train_mlp.py"), "--slow-rank", "7"], "not a rank of 1"),
    ([sys.executable, str(ROOT / "examples" / "drop_in.py"), "--iters", "0"], "at least 1"),
    ([sys.executable, str(ROOT / "examples" / "gpu_allreduce.py"), "--count", "0"], "at least 1"),
])
def test_programs_refuse(cmd, words):
    proc = run(cmd)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert words in proc.stderr and "Traceback" not in proc.stderr


def test_a_bare_number_is_read_in_the_flags_unit():
    from stragglar_mpi.schedule.units import bandwidth_in, parse_time, time_in
    assert parse_time("3") == 3.0 and parse_time("3us") == pytest.approx(3e-6)
    assert time_in("us")("3") == 3.0 and time_in("us")("0.003ms") == pytest.approx(3.0)
    assert time_in("ms")("1s") == 1000.0
    assert bandwidth_in("GB/s")("5") == 5.0 and bandwidth_in("GB/s")("450GB/s") == pytest.approx(450.0)
    for bad in ("nan", "-1", "3 parsec"):
        with pytest.raises(argparse.ArgumentTypeError):
            time_in("us")(bad)


def test_a_delay_is_in_ms_and_a_size_as_format_size_prints_it_on_every_command_line():
    """--delay reads a bare number in ms everywhere (the schedule's simulator, the demo, the
    benchmark); size defaults are spelt as format_size prints them."""
    from stragglar_mpi.bench._args import parse_delay, parser
    from stragglar_mpi.schedule.units import MiB, format_size, parse_size
    table = run(SCHEDULE + ["simulate", "--n", "4", "--delay", "5"]).stdout.splitlines()
    assert table[4].split()[:2] == ["4", "5.000"], table          # the delay column, in ms
    assert parse_delay("5").a == 5.0
    args = parser().parse_args([])
    assert (args.minbytes, args.maxbytes) == (MiB, 64 * MiB) and format_size(16 * MiB) == "16M"
    assert parse_size("16M") == parse_size("16MiB") == 16 * MiB
    assert "(default 64M)" in run([sys.executable, "-m", "stragglar_mpi.bench.demo", "--help"]).stdout


def test_schedule_show_explains_its_notation():
    """``show`` ends with a legend of what a round's entries mean; ``--json`` stays pure JSON."""
    proc = run(SCHEDULE + ["show", "--n", "4"])
    assert proc.returncode == 0 and "R0:" in proc.stdout and "c0:0=>3" in proc.stdout
    legend = proc.stdout.strip().splitlines()[-2:]
    assert legend[0].startswith("legend:") and "->" in legend[0] and "=>" in legend[1]
    assert "legend" not in run(SCHEDULE + ["show", "--n", "4", "--json"]).stdout
