"""``python -m firsttoken``: the ``firsttoken`` command."""

import sys

from .cli import main

sys.exit(main())
