"""The seeded concurrency fuzzer (tests/fuzz/, docs/FUZZ.md): 100 random legal programs
at 3 ranks and 100 at 4, many per mpiexec launch, every result checked exactly.

SMPI_FUZZ_FEATURES (default "safe": without the features known to fail today,
programs.BROKEN) and SMPI_FUZZ_SKIP choose what the programs may do; "all" once the
engine's fixes have landed.  SMPI_FUZZ_SEEDS (default 0:100) the seeds.  A failing seed
is reported with the command that reruns just it.
"""
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "fuzz"))

import run as fuzz  # noqa: E402  (tests/fuzz/run.py)

FEATURES = os.environ.get("SMPI_FUZZ_FEATURES", "safe")
SEEDS = os.environ.get("SMPI_FUZZ_SEEDS", "0:100")


def campaign(n, seeds, *flags):
    args = fuzz.parser().parse_args(["--quiet", "--seeds", seeds, "--features", FEATURES, *flags])
    features = fuzz.features_from(args.features)
    lines = []
    summary = fuzz.campaign(n, fuzz.seed_range(args.seeds), features, args, out=lines.append)
    fuzz.report(summary, features, args, out=lines.append)
    return summary, "\n".join(lines)


@pytest.mark.parametrize("n", [3, 4])
def test_random_legal_programs(n):
    summary, text = campaign(n, SEEDS, "--oracle", "--program-timeout", "60")
    print(summary.line())
    assert not summary.failures and summary.ok == len(fuzz.seed_range(SEEDS)), text[-40000:]


def test_the_fuzzer_reports_a_wrong_result_and_a_hang_with_the_seed(monkeypatch):
    """Its own checks: a corrupted result is a wrong program with got vs want, a rank that
    stops is a hang with every rank's stacks, each with the command that reruns it."""
    monkeypatch.setenv("SMPI_FUZZ_SABOTAGE", "wrong")
    summary, text = campaign(3, "5:7")
    assert summary.count("wrong") == 2 and "got" in text and "want" in text, text
    assert "--seeds 6 " in text, text                              # the rerun of one seed
    monkeypatch.setenv("SMPI_FUZZ_SABOTAGE", "hang")
    summary, text = campaign(3, "5", "--program-timeout", "5", "--show", "1000")
    assert summary.count("hang") == 1, text
    assert all(f"rank{r}: its threads' stacks" in text for r in range(3)), text
    assert "run.py --np 3 --seeds 5 " in text, text
