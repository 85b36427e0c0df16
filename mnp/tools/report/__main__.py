"""``python -m mnp.tools.report``: :func:`mnp.tools.report.report.main`."""

from mnp.tools.report.report import main

raise SystemExit(main())
