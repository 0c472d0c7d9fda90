"""``python -m cli``: the ``yimi`` command."""

import sys

from cli.main import main

sys.exit(main())
