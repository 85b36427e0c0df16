"""The report of finished sweeps (``python -m mnp.tools.report``): runs and cells (``report_runs``), the records
runs.csv, results.csv and claims.csv (``report_records``, ``row_claims``), intervals and paired tests (``stats``),
tables (``report_tables``, ``report_conformal``), the paper's numbers (``report_paper``, ``paper_results.csv``),
plots (``plots``), labels by today's defaults (``relabel``) and wandb (``report_wandb``)."""
