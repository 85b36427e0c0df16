"""The generated docs (``python -m mnp.tools.docgen [--check]``): the renderers of the results, goals, decisions,
speed, conformal and tuning sections (``docgen_*``), the paper-gap records (``differences``, ``differences_gaps``)
and the import graph (``depgraph``)."""
