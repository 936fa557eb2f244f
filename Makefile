# make demo : local venv, install, run the demo under mpiexec (4 ranks, one late)
# make test : local venv, install with the test extra, run the whole test suite
# MPI=openmpi (make test MPI=openmpi, make demo MPI=openmpi ...): the same on the
#   system's Open MPI (apt-get install openmpi-bin libopenmpi-dev), in .venv-openmpi,
#   with mpi4py built from source against it. Default: MPI=mpich, the embedded wheel.
PYTHON ?= python3
MPI    ?= mpich
NP     ?= 4
SOURCES := setup.py pyproject.toml $(shell find stragglar_mpi cython_src -name '*.py' -o -name '*.pyx' -o -name '*.h' -o -name '*.json' 2>/dev/null)

ifeq ($(MPI),mpich)
VENV    ?= .venv
MPIEXEC  = $(abspath $(VENV))/bin/mpiexec
else ifeq ($(MPI),openmpi)
VENV    ?= .venv-openmpi
# Debian names them mpicc.openmpi / mpiexec.openmpi (mpicc / mpiexec are alternatives).
OMPI_MPICC   ?= $(firstword $(shell command -v mpicc.openmpi mpicc 2>/dev/null))
OMPI_MPIEXEC ?= $(firstword $(shell command -v mpiexec.openmpi mpiexec 2>/dev/null))
MPIEXEC  = $(if $(filter 0,$(shell id -u)),OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1) \
           $(OMPI_MPIEXEC) --oversubscribe
export SMPI_TEST_MPIEXEC := $(OMPI_MPIEXEC)
else
$(error MPI must be mpich (the embedded wheel) or openmpi, not '$(MPI)')
endif
PY := $(VENV)/bin/python

.PHONY: demo test install info clean

$(VENV)/.installed: $(SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
ifeq ($(MPI),openmpi)
	@test -n "$(OMPI_MPICC)" -a -n "$(OMPI_MPIEXEC)" || { echo "Open MPI not found:" \
	    "apt-get install openmpi-bin libopenmpi-dev (or set OMPI_MPICC, OMPI_MPIEXEC)" >&2; exit 1; }
	MPICC=$(OMPI_MPICC) $(PY) -m pip install -q --no-binary=mpi4py "mpi4py>=4.0"
	MPICC=$(OMPI_MPICC) $(PY) -m pip install -q ".[test]"
	@# No build inside the source tree: that one is the embedded mpich's. Tests, demo
	@# and info import the installed package (they run outside the repository root).
else
	$(PY) -m pip install -q ".[test]"
	@# Also build the extension in the source tree, so that `python -m stragglar_mpi...`
	@# run from this folder (which imports the source tree) has the compiled transport.
	$(PY) -m pip install -q "setuptools>=77" "cython>=3.0"
	$(PY) setup.py -q build_ext --inplace
endif
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	cd tests && PATH="$(abspath $(VENV))/bin:$$PATH" $(MPIEXEC) -n $(NP) $(abspath $(PY)) -m stragglar_mpi.bench.demo

test: $(VENV)/.installed
	cd tests && PATH="$(abspath $(VENV))/bin:$$PATH" $(abspath $(PY)) -m pytest -ra $(PYTEST_ARGS)

info: $(VENV)/.installed
	cd tests && $(abspath $(PY)) -m stragglar_mpi info

clean:
	rm -rf $(VENV) build *.egg-info stragglar_mpi/*.so cython_src/*.c
