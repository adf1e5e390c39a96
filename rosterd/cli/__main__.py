"""``python -m rosterd.cli``: the same as the ``roster`` script."""

import sys

from ._main import main

sys.exit(main())
