"""docs/ARCHITECTURE.md names only what exists.

Every `code span` of the page that names a repository path (``core/state.py``, ``call/_entry.pyx``,
``tests/perf/bench_entry.py``, a room ``run/``) must exist, relative to the repository or to
``stragglar_mpi/``; one that names a module and something in it (``decide/tuning.timed``,
``call/allreduce.steps(...)``, ``call/report.Log.ran``) must name a module that exists and a
name that the module defines.
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
BASES = (ROOT, ROOT / "stragglar_mpi", ROOT / "cython_src")
SUFFIXES = (".py", ".pyx", ".pxi", ".pxd", ".h", ".json", ".md", ".sh")
#: room/module[.name[.name]] or a path with a suffix, inside a code span
REFERENCE = re.compile(r"(?<![\w/.-])((?:\w+/)+)(\w+)?((?:\.\w+)*)")


def references(text):
    for span in re.findall(r"`([^`]+)`", text):
        for m in REFERENCE.finditer(span):
            yield m.group(1), m.group(2) or "", m.group(3)


def exists(rel):
    return any((base / rel).exists() for base in BASES)


def defines(module: Path, name: str) -> bool:
    pattern = rf"^\s*(?:c?p?def|class|cdef class|cdef [\w ]+)\s+{name}\b|^\s*{name}\s*[:=]|^\s*\w+\.{name}\s*="
    return re.search(pattern, module.read_text(), re.M) is not None


def problems(text):
    text = text.replace("<br/>", " ")       # the picture's line breaks (Mermaid)
    found = []
    for folder, stem, dotted in references(text):
        if not stem:                                  # a room or folder: `run/`
            if not exists(folder):
                found.append(f"{folder}: no such folder")
            continue
        if dotted and ("." + dotted.split(".")[1]) in SUFFIXES:
            path = folder + stem + "." + dotted.split(".")[1]
            if not exists(path):
                found.append(f"{path}: no such file")
            continue
        modules = [base / (folder + stem + s) for base in BASES for s in (".py", ".pyx")]
        modules = [m for m in modules if m.exists()]
        if not modules:
            found.append(f"{folder}{stem}: no such module")
        elif dotted:
            first = dotted.split(".")[1]
            if not any(defines(m, first) for m in modules):
                found.append(f"{folder}{stem}{dotted}: {first} is not defined there")
    return found


def test_the_checker_catches_a_missing_path_and_a_missing_name():
    assert problems("`call/_fast.pyx: Allreduce` and `decide/tuning.synchronous`") == [
        "call/_fast.pyx: no such file", "decide/tuning.synchronous: synchronous is not defined there"]
    assert problems("`call/_entry.pyx`, `run/_machine.pxi`, `decide/tuning.timed`, `run/`") == []


def test_every_path_in_the_architecture_exists():
    found = problems(DOC.read_text())
    assert not found, "docs/ARCHITECTURE.md names what does not exist: " + "; ".join(found)
