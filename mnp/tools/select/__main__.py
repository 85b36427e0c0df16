"""``python -m mnp.tools.select``: :func:`mnp.tools.select.select.main`."""

from mnp.tools.select.select import main

raise SystemExit(main())
