"""The ``yimi`` command: one module per command group; thin — parses, calls, prints."""
