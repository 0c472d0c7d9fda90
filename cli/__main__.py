"""``python -m cli``: the ``yimi`` command."""

from cli.main import run

run()
