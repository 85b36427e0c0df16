"""``python -m mnp.tools.docgen``: :func:`mnp.tools.docgen.docgen.main`."""

from mnp.tools.docgen.docgen import main

raise SystemExit(main())
