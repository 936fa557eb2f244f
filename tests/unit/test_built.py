"""One compiled path: the package without its compiled modules does not import, and says
how to build them; nothing falls back to a Python twin."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import stragglar_mpi

INSTALLED = Path(stragglar_mpi.__file__).parent


def test_an_unbuilt_tree_fails_at_import_with_the_build_hint(tmp_path):
    shutil.copytree(INSTALLED, tmp_path / "stragglar_mpi",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    run = subprocess.run([sys.executable, "-c", "import stragglar_mpi"], cwd=tmp_path,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: stragglar_mpi: the compiled modules are not built"), run.stderr
    assert "run/_interpreter" in last and "build_ext --inplace" in last and "pip install ." in last


def test_the_installed_package_has_every_compiled_module():
    from stragglar_mpi._built import COMPILED, require_build
    require_build()
    assert len(COMPILED) == 4
