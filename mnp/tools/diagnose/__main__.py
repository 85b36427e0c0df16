"""``python -m mnp.tools.diagnose``: :func:`mnp.tools.diagnose.diagnose.cli`."""

from mnp.tools.diagnose.diagnose import cli

raise SystemExit(cli())
