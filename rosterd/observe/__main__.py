"""``python -m rosterd.observe``: the span exporter the daemon starts as a child."""

from ._exporter import main

raise SystemExit(main())
