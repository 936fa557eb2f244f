"""The front door stays short and every relative link in the docs leads somewhere.

A link ``[text](path#anchor)`` in README.md, docs/*.md, examples/README.md, slurm/README.md
or tests/README.md must name an existing file (relative to the file that holds the link), and
an anchor must be one of the headings of the file it points at, as GitHub spells anchors.
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "examples" / "README.md", ROOT / "slurm" / "README.md", ROOT / "tests" / "README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
README_LINES = 150


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set:
    text = FENCE.sub("", path.read_text())
    return {anchor(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def links(path: Path):
    for target in LINK.findall(FENCE.sub("", path.read_text())):
        if not re.match(r"[a-z]+:", target):          # http:, https:, mailto: are not checked
            yield target


def test_anchor_spelling():
    assert anchor("Across nodes: hierarchical StragglAR on 2 emulated nodes of 4") == \
        "across-nodes-hierarchical-stragglar-on-2-emulated-nodes-of-4"
    assert anchor("Open MPI 4.1 (MPI 3.1), 8 ranks, 16 and 64 MiB") == "open-mpi-41-mpi-31-8-ranks-16-and-64-mib"


def test_the_readme_fits_on_a_few_screens():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_LINES, f"README.md has {lines} lines; move detail to docs/"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    broken = []
    for target in links(doc):
        path, _, frag = target.partition("#")
        where = (doc.parent / path).resolve() if path else doc
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif frag and where.suffix == ".md" and frag not in anchors(where):
            broken.append(f"{target}: no heading with that anchor in {where.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)
