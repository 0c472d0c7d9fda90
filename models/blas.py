"""numpy's BLAS thread pool, for processes whose matrix products are small.

numpy's bundled OpenBLAS starts one thread per core and, after each call it split across
them, keeps its workers busy-waiting for the next one. A process that makes many small
calls pays for the waiting: a 3,000 × 512 matrix-vector product (a recall search over the
in-memory vectors) cost 2.3 ms of process CPU with two threads against 0.65 ms with one,
measured here on 2 shared cores; the text embedder already limits its own forward pass to
one thread (``models.embed_use.BLAS_THREADS``), but not the products made elsewhere.
:func:`single_thread` sets the whole process to one BLAS thread; the hub's process calls it
at start.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

THREADS = 1
"""BLAS threads in a process that called :func:`single_thread`"""


def single_thread() -> None:
    """Run numpy's BLAS libraries with :data:`THREADS` thread(s) in this process from now on
    (all threads of the process: the limit is the library's own, not per thread)."""
    import numpy  # noqa: F401  (loads the BLAS library threadpoolctl is to find)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=THREADS, user_api="blas")
    log.debug("BLAS limited to %d thread(s)", THREADS)


def blas_threads() -> list[int]:
    """The thread count of every BLAS library loaded in this process."""
    from threadpoolctl import threadpool_info

    return [int(i["num_threads"]) for i in threadpool_info() if i.get("user_api") == "blas"]
