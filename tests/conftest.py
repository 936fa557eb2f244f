"""Test layout.

unit/  : pure Python, no MPI processes.
mpi/   : test bodies that run on every rank under ``mpiexec -n N``; launched by
         test_mpi.py for several N and both transports.  They are collected only
         inside such a launch (SMPI_TEST_IN_MPIEXEC=1).
"""
import os

collect_ignore = [] if os.environ.get("SMPI_TEST_IN_MPIEXEC") else ["mpi"]
