"""The package has no import circle: every import between its modules, at module level
or inside a function (a lazy import is a circle all the same), read from the sources
(Python and Cython), forms an acyclic graph."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stragglar_mpi"


def module_name(path, root=ROOT):
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package=PACKAGE):
    """Every module by its dotted name; a Cython source builds the module of its room
    (setup.py: cython_src/<room>/<name>.pyx is stragglar_mpi.<room>.<name>)."""
    found = {module_name(p, package.parent): p for p in package.rglob("*.py")}
    compiled = package.parent / "cython_src"
    found.update({f"{package.name}." + module_name(p, compiled): p for p in compiled.rglob("*.pyx")})
    return found


def cython_text(path):
    """A Cython source with the .pxi files it includes (beside it), as the compiler reads it."""
    text = path.read_text()
    return re.sub(r'^include "([\w.]+\.pxi)"$', lambda m: cython_text(path.parent / m.group(1)), text, flags=re.M)


def _base(name, path, level):
    """The package that a relative import of ``level`` dots in module ``name`` starts from."""
    parts = name.split(".")
    if path.name != "__init__.py":
        parts = parts[:-1]
    return parts[:len(parts) - level + 1]


def imports_of(name, path, known):
    """The package's modules that ``name`` imports (not the packages that contain it)."""
    text = cython_text(path) if path.suffix == ".pyx" else path.read_text()
    if path.suffix == ".pyx":   # the relative imports of a Cython file, by their Python form
        text = "\n".join(m.group(0).strip() for m in re.finditer(r"^\s*from \.[\w.]* import [\w, ]+", text, re.M))
    targets = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            parts = _base(name, path, node.level) if node.level else []
            base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in known else base)
        elif isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
    enclosing = {".".join(name.split(".")[:k]) for k in range(1, name.count(".") + 1)}
    return {t for t in targets if t in known and t != name and t not in enclosing}


def graph(package=PACKAGE):
    known = modules(package)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def find_cycle(edges):
    """One cycle as a list of modules, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_package_has_no_import_circle():
    edges = graph()
    assert len(edges) > 20 and edges["stragglar_mpi.call.allreduce"], "the graph was not read"
    cycle = find_cycle(edges)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_checker_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_lazy_and_cython_imports_count():
    edges = graph()
    assert "stragglar_mpi.core.errors" in edges["stragglar_mpi.run._interpreter"]        # inside a cdef function of a .pxi
    assert "stragglar_mpi.schedule.verify" in edges["stragglar_mpi.schedule"]           # inside a function
    assert "stragglar_mpi.memory.device" in edges["stragglar_mpi.run.execute"]
    assert "stragglar_mpi.run.execute" not in edges["stragglar_mpi.memory.device"]


#: The rooms, lowest first: a module may import from its own room and from lower ones.
#: docs/ARCHITECTURE.md says what each room knows.
LAYERS = {"schedule": 0, "_version": 0, "_built": 0, "core": 1, "memory": 2, "decide": 3, "bind": 4, "run": 5,
          "call": 6, "__init__": 6, "bench": 7, "__main__": 7,
          "torch": 7}     # optional integrations: they need their extra (pyproject.toml)


def layer_of(module):
    """The layer of ``stragglar_mpi.<room>...``; the package itself is its __init__."""
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else "__init__"]


def upward_imports(edges):
    """Every import of a higher room, as 'importer -> imported' (empty: the layering holds)."""
    return sorted(f"{src} (layer {layer_of(src)}) -> {dst} (layer {layer_of(dst)})"
                  for src, targets in edges.items() for dst in targets
                  if layer_of(dst) > layer_of(src))


def test_every_module_belongs_to_a_room():
    for name in graph():
        layer_of(name)      # a KeyError names a module outside every room


def test_no_room_imports_a_higher_one():
    found = upward_imports(graph())
    assert not found, "upward imports:\n" + "\n".join(found)


def test_the_layering_check_finds_a_planted_upward_import(tmp_path):
    """A copy of the package with one lazy upward import (core -> call) fails the check."""
    import shutil
    copy = tmp_path / "stragglar_mpi"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    errors = copy / "core" / "errors.py"
    errors.write_text(errors.read_text() + "\n\ndef _planted():\n    from ..call import report\n")
    found = upward_imports(graph(copy))
    assert "stragglar_mpi.core.errors (layer 1) -> stragglar_mpi.call.report (layer 6)" in found
