"""memory: where a call's buffers live and the local work on them.

Knows: the caller's buffer specs read into ``Message``s (``buffers``), host memory and its
scratch pools (``host``), GPU memory through Numba CUDA (``cuda``, ``kernels``, ``device``):
copy, reduce, scratch per operation.
Must not know: schedules, algorithms, roles, MPI communicators beyond a buffer's address.
"""
