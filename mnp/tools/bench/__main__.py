"""``python -m mnp.tools.bench``: :func:`mnp.tools.bench.bench.main`."""

from mnp.tools.bench.bench import main

main()
