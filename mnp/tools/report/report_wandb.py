"""The report's aggregate as a wandb run of its own: ``python -m mnp.tools.report ... --wandb-project NAME``.

One run with ``job_type=report`` in the project the training runs went to, offline unless ``WANDB_MODE``
says otherwise (:func:`mnp.cli.wandb_utils.mode`), written under ``<out>/wandb``:

- ``report/results``: every cell (``experiment``, ``model``, ``variant``, ``dataset``, ``group``, ``metric``,
  ``mean``, ``std``, ``n``); ``group`` is the wandb group of the cell's training runs
  (:func:`mnp.runs.naming.group_name`), so the table joins the runs table on it.
- ``report/<metric>``: ``group``, ``mean``, ``std``, ``n`` of one headline metric, with a bar chart
  ``charts/<metric>/mean``.
"""

from __future__ import annotations

from pathlib import Path

from mnp.cli.wandb_utils import mode, table_logs
from mnp.eval.wandb_tables import OOD_KEY, Table, number
from mnp.runs.naming import group_name
from mnp.tools.report.report_runs import Cell

HEADLINE = ("test/acc", "test/ece", "noise/acc_mean", "time/train_epoch_s")
COLUMNS = ["experiment", "model", "variant", "dataset", "group", "metric", "mean", "std", "n"]


def report_tables(agg: dict[tuple, Cell]) -> dict[str, Table]:
    """The report run's tables by name (``results`` and one per headline metric found)."""
    keys = sorted(agg, key=lambda k: tuple("" if x is None else str(x) for x in k))
    rows = [
        [
            e,
            m,
            v or "",
            d,
            group_name(e, m, d, v),
            k,
            number(agg[(e, m, v, d, k)].mean),
            number(agg[(e, m, v, d, k)].std),
            agg[(e, m, v, d, k)].n,
        ]
        for e, m, v, d, k in keys
    ]
    tables = {"results": Table(COLUMNS, rows, [])}
    headline = [*HEADLINE, *sorted({k[4] for k in keys if OOD_KEY.match(k[4])})]
    for metric in headline:
        cells = [row[4:5] + row[6:] for row in rows if row[5] == metric]
        if cells:
            tables[metric] = Table(["group", "mean", "std", "n"], cells, [("bar", "group", "mean")])
    return tables


def push(agg: dict[tuple, Cell], out: str | Path, project: str, dirs: list[str]) -> Path:
    """Log the aggregate as one run (see the module doc); returns the run's directory."""
    import wandb

    if not agg:
        raise ValueError("no finished runs to push to wandb")
    experiments = sorted({k[0] for k in agg})
    run = wandb.init(
        project=project,
        dir=str(out),
        mode=mode(),
        name="report_" + "+".join(experiments),
        group="+".join(experiments) + "/report",
        job_type="report",
        tags=experiments,
        config={"experiments": experiments, "dirs": [str(d) for d in dirs]},
    )
    try:
        run.log(table_logs(report_tables(agg), prefix="report"))
        return Path(run.dir).parent
    finally:
        run.finish()
