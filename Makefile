# make demo : local venv, install, run the demo under mpiexec (4 ranks, one late)
# make test : local venv, install with the test extra, run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
NP     ?= 4
SOURCES := setup.py pyproject.toml $(shell find stragglar_mpi cython_src -name '*.py' -o -name '*.pyx' -o -name '*.json' 2>/dev/null)

.PHONY: demo test test-python install info bench clean

$(VENV)/.installed: $(SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q ".[test]"
	@# Also build the extension in the source tree, so that `python -m stragglar_mpi...`
	@# run from this folder (which imports the source tree) has the compiled transport.
	$(PY) -m pip install -q "setuptools>=77" "cython>=3.0"
	$(PY) setup.py -q build_ext --inplace
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/mpiexec -n $(NP) $(abspath $(PY)) -m stragglar_mpi.demo

test: $(VENV)/.installed
	cd tests && PATH="$(abspath $(VENV))/bin:$$PATH" $(abspath $(PY)) -m pytest -ra $(PYTEST_ARGS)

info: $(VENV)/.installed
	$(PY) -m stragglar_mpi info

clean:
	rm -rf $(VENV) build *.egg-info stragglar_mpi/*.so cython_src/*.c
