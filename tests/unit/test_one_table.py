"""One fact, one place: an algorithm's name (and "auto", the library's choice) is
spelled only in schedule/algorithms.py.

Every list of algorithms (auto's choices, the tuner's candidates, the report, the
verifier, the command lines, the bench's default) is derived from the table's
columns, and code that compares against one algorithm uses the table's named
constant (``algorithms.NATIVE``).  So a second copy of the table, typed out as
string literals, fails here.  Whole string constants only ("ring" inside
"a ring of nodes" is prose); docstrings are prose; ``__all__`` names functions.
"""
import ast
import io
import tokenize
from pathlib import Path

import pytest

from stragglar_mpi.schedule.algorithms import AUTO, REDUCE_TO_OWNERS, TABLE

ROOT = Path(__file__).resolve().parents[2]
TABLE_FILE = ROOT / "stragglar_mpi" / "schedule" / "algorithms.py"
NAMES = {a.name for a in TABLE} | {AUTO, REDUCE_TO_OWNERS}


def sources():
    compiled = [p for ext in ("*.pyx", "*.pxi") for p in sorted((ROOT / "cython_src").rglob(ext))]
    return [p for p in sorted((ROOT / "stragglar_mpi").rglob("*.py")) + compiled if p != TABLE_FILE]


def _docstrings(tree):
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def _all_lists(tree):
    return {id(c) for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            for c in ast.walk(node.value)}


def python_literals(text):
    """(line, name) of every algorithm name written as a whole string constant."""
    tree = ast.parse(text)
    skip = _docstrings(tree) | _all_lists(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in NAMES and id(node) not in skip]


def cython_literals(text):
    """The same for Cython, which ``ast`` cannot parse: its string tokens, less a string
    that is a statement of its own (a docstring)."""
    found, tokens = [], list(tokenize.generate_tokens(io.StringIO(text).readline))
    statement_start = (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT)
    for i, tok in enumerate(tokens):
        if tok.type != tokenize.STRING:
            continue
        alone = (i == 0 or tokens[i - 1].type in statement_start) and tokens[i + 1].type == tokenize.NEWLINE
        try:
            value = ast.literal_eval(tok.string)
        except (ValueError, SyntaxError):
            continue
        if value in NAMES and not alone:
            found.append((tok.start[0], value))
    return found


def literals(path):
    text = path.read_text()
    return python_literals(text) if path.suffix == ".py" else cython_literals(text)


def test_algorithm_names_are_spelled_only_in_the_table():
    found = [f"{p.relative_to(ROOT)}:{line}: {name!r}" for p in sources() for line, name in literals(p)]
    assert not found, ("algorithm names as string literals outside schedule/algorithms.py "
                       "(use its constants or columns):\n" + "\n".join(found))


@pytest.mark.parametrize("scan", [python_literals, cython_literals])
def test_the_scan_finds_a_planted_literal(scan):
    planted = ('def f(algo):\n    """ring is prose here"""\n    return algo == "ring" or "a ring" in algo\n'
               'def g(algo="auto"):\n    return algo\n')
    assert sorted(scan(planted)) == [(3, "ring"), (4, "auto")]


def test_the_scan_reads_every_source():
    names = {p.name for p in sources()}
    assert {"policy.py", "tuning.py", "report.py", "verify.py", "_interpreter.pyx", "_machine.pxi"} <= names
