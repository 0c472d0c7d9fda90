"""Work counters in a hub a bench started with ``--counts`` (a bench helper, not the product).

Python imports this module as it starts (``sitecustomize``) when ``bench/counting`` is on
``PYTHONPATH``, as :class:`bench.hubproc.HubProcess` puts it with ``counts``. It does
nothing unless the process is ``yimi hub run`` and ``YIMI_BENCH_COUNTS`` names a file; then
it counts, exactly (whatever the machine's noise):

- the SQL statements each database file ran (an ``apsw`` exec tracer on every connection),
  and of them the ``BEGIN``s: the transactions;
- the syncs the hub asked for itself (``os.fdatasync`` / ``os.fsync``: group commit's, the
  gateway's batches; SQLite's own, inside a checkpoint, are not seen);

and appends them to the file as one JSON line on ``SIGUSR1`` (a bench's snapshot) and at
exit. A bench divides the difference of two snapshots by the trips between them.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import signal
import sys
import threading
from typing import Any

OUT_ENV = "YIMI_BENCH_COUNTS"


def _install(out: str) -> None:
    import apsw

    lock = threading.Lock()
    statements: collections.Counter[str] = collections.Counter()
    begins: collections.Counter[str] = collections.Counter()
    syncs: collections.Counter[str] = collections.Counter()

    def on_connection(conn: apsw.Connection) -> None:
        name = os.path.basename(conn.filename) or ":memory:"

        def trace(_cursor: Any, sql: str, _bindings: Any) -> bool:
            with lock:
                statements[name] += 1
                if sql.lstrip()[:5].upper() == "BEGIN":
                    begins[name] += 1
            return True

        conn.exec_trace = trace

    apsw.connection_hooks.append(on_connection)

    def counted(name: str, call: Any) -> Any:
        def sync(fd: int) -> None:
            with lock:
                syncs[name] += 1
            call(fd)

        return sync

    os.fdatasync = counted("fdatasync", os.fdatasync)
    os.fsync = counted("fsync", os.fsync)

    def snapshot(*_: Any) -> None:
        with lock:
            line = json.dumps(
                {"statements": statements, "begins": begins, "syncs": syncs}, sort_keys=True
            )
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    signal.signal(signal.SIGUSR1, snapshot)
    atexit.register(snapshot)


_out = os.environ.get(OUT_ENV)
if _out and "hub" in sys.orig_argv and "run" in sys.orig_argv:
    _install(_out)
