"""``python -m cli``: the ``yimi`` command."""

from cli.main import main

main()
