"""The step protocol's naming rule (core/steps.py): a function that is a generator of
steps says so first in its docstring ("Generator: ..." or "Generator ..."), so that a
reader knows to call it with ``yield from``.  The rooms a call's path runs through are
scanned (schedule/'s generators yield data, not steps)."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "stragglar_mpi"
ROOMS = ("core", "memory", "decide", "bind", "run", "call")


def _own_yields(func):
    """Whether ``func`` itself yields (not a function or lambda nested in it)."""
    todo = list(func.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return False


def unnamed_generators(text):
    """(line, name) of each generator function whose docstring does not say so first."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and _own_yields(node):
            doc = ast.get_docstring(node) or ""
            if not doc.startswith("Generator"):
                found.append((node.lineno, node.name))
    return found


def test_every_generator_of_steps_says_so():
    files = [p for room in ROOMS for p in sorted((PACKAGE / room).rglob("*.py"))]
    assert len(files) > 30, "the rooms were not read"
    found = [f"{p.relative_to(PACKAGE)}:{line}: {name}" for p in files
             for line, name in unnamed_generators(p.read_text())]
    assert not found, "generators whose docstring does not start with 'Generator':\n" + "\n".join(found)


def test_the_rule_finds_a_planted_generator():
    text = 'def f():\n    """Waits."""\n    yield 1\n\ndef g():\n    """Generator: waits."""\n    yield 1\n'
    assert unnamed_generators(text) == [(1, "f")]
