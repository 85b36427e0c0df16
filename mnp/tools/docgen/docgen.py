"""The results tables of README.md and docs/*.md, generated from the committed result files.

``python -m mnp.tools.docgen`` rewrites every block ``<!-- generated:NAME -->…<!-- /generated:NAME -->`` in
README.md and docs/*.md with the output of the renderer NAME below; ``--check`` writes nothing and
exits 1 when a block differs from what the files give (tests/test_docs.py runs it). Sources:

* ``results/paper_main/results.csv`` and ``runs.csv``: ``python -m mnp.tools.report <paper_main sweep> --out
  results/paper_main --paper``; the claims ("MNP beats X", paired tests) are computed from these two
  (:mod:`mnp.tools.docgen.docgen_results`);
* ``results/switches/results.csv``: ``python -m mnp.tools.report <paper_main sweep> <switches sweep>
  --out results/switches --models mnp --relabel``;
* ``results/digits_c/results.csv``: ``python -m mnp.tools.report <digits_c sweep> --out results/digits_c``;
* ``docs/goals.csv``: the goal table of the fidelity issue; ``benchmarks/custom_defaults.json``:
  ``python benchmarks/custom_defaults.py --before``; ``figures/figure2.json``: ``python -m mnp.tools.figures.figure2 --out figures``;
  the GPU and start-up measurements of :mod:`mnp.tools.docgen.docgen_speed` (its renderers are registered here); the models'
  declared domains (``domains`` of each class in ``conf/model/``, mnp.framework.domains) for the table of model keys.
  ``figures/noise_curves.json`` and ``.png`` (accuracy per σ: bands, ceiling, per-view curves; :mod:`mnp.tools.figures.noise_figure`) are
  rewritten from ``results/paper_main/results.csv`` when they differ from it; ``benchmarks/view_weighting_<dataset>.json``:
  ``python benchmarks/view_weighting.py <mnp run dirs> --out ...``; ``results/decisions/*.csv``: the decision
  records of :mod:`mnp.tools.select` (:mod:`mnp.tools.docgen.docgen_decisions`); ``results/conformal/``: the conformal
  study's report and ``figures/conformal_curves.json`` and ``.png`` (:mod:`mnp.tools.docgen.docgen_conformal`);
  ``results/paper_tuned/``: the tables at the tuned defaults (:mod:`mnp.tools.docgen.docgen_tuned`).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path

from mnp.runs.migrations import modern_variant
from mnp.tools.docgen import (
    docgen_ceiling,
    docgen_conformal,
    docgen_decisions,
    docgen_differences,
    docgen_results,
    docgen_speed,
    docgen_tuned,
    docgen_tuning,
)
from mnp.tools.docgen.docgen_results import DATASETS, MAIN
from mnp.tools.docgen.docgen_sources import SourceError, reading
from mnp.tools.figures import conformal_figure, noise_figure
from mnp.tools.report.report_records import claims, read_runs
from mnp.tools.report.report_runs import dataset_label, markdown_table, model_label, read_cells, read_results
from mnp.tools.report.row_claims import add_row_tests

ROOT = Path(__file__).resolve().parents[3]
BLOCK = re.compile(r"(<!-- generated:(\w+) -->\n)(.*?)(<!-- /generated:\2 -->)", re.S)
OPENING = re.compile(r"^<!-- generated:(\w+) -->$", re.M)  # a line of its own: prose may name the syntax


# ---------------------------------------------------------------------------- reading
def cell(res: dict, model: str, dataset: str, metric: str, scale: float, digits: int, variant: str = "") -> str:
    """``mean ± std`` (the mean alone for one seed)."""
    c = res.get((model, variant, dataset, metric))
    if c is None:
        return "–"
    text = f"{c['mean'] * scale:.{digits}f}"
    return text + (f" ± {c['std'] * scale:.{digits}f}" if c["n"] > 1 else "")


def seeds(res: dict, model: str, dataset: str, variant: str = "") -> int:
    c = res.get((model, variant, dataset, "test/acc"))
    return c["n"] if c else 0


# ---------------------------------------------------------------------------- renderers
def _goal_rows() -> list[dict]:
    path = ROOT / "docs" / "goals.csv"
    with reading(path), open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def goals(src: dict) -> list[list[str]]:
    """Each goal of the fidelity issue against `mnp`'s mean over its seeds: dataset, metric, goal, `mnp`, seeds and
    status (met, missed by how much, or not run)."""
    rows = []
    for g in _goal_rows():
        scale, digits = {k: (s, d) for k, _, s, d in MAIN}[g["metric"]]
        c, goal = src["paper_main"].get(("mnp", "", g["dataset"], g["metric"])), float(g["goal"])
        ours = None if c is None else c["mean"] * scale
        met = ours is not None and (ours >= goal if g["direction"] == "≥" else ours <= goal)
        status = "not run" if ours is None else "met" if met else f"missed by {abs(ours - goal):.{digits}f}"
        shown = "–" if ours is None else f"{ours:.{digits}f}"
        rows.append(
            [dataset_label(g["dataset"]), g["label"], f"{g['direction']} {goal:g}", shown, c["n"] if c else 0, status]
        )
    return rows


def render_goals(src: dict) -> str:
    """Each goal of the fidelity issue against `mnp`'s mean over its seeds: met, or missed by how much."""
    return markdown_table(["dataset", "metric", "goal", "`mnp`", "seeds", "status"], goals(src))


def render_goals_summary(src: dict) -> str:
    """README: per dataset, which goals of the fidelity issue `mnp` meets and by how much it misses the others."""
    by: dict[str, list[str]] = {}
    for dataset, metric, _, ours, n, status in goals(src):
        by.setdefault(f"{dataset} ({n} seeds)", []).append(
            f"{metric} {ours} ({status})" if status != "not run" else f"{metric} not run"
        )
    return "\n".join(f"- {d}: " + "; ".join(v) for d, v in by.items())


def render_switches(src: dict) -> str:
    """Each measured switch of `mnp` against its defaults on the same seeds."""
    res, rows = src["switches"], []
    for d in DATASETS:
        variants = sorted({v for (m, v, dd, _) in res if m == "mnp" and dd == d})
        rows += [
            [dataset_label(d), modern_variant(v).replace(",", ", ") if v else "defaults",
             *(cell(res, "mnp", d, k, s, g, variant=v) for k, _, s, g in MAIN), seeds(res, "mnp", d, v)]
            for v in (variants if variants != [""] else [])
        ]  # fmt: skip
    return markdown_table(["dataset", "`mnp` with", "acc %", "ECE", "noisy acc %", "seeds"], rows)


def render_custom_defaults(src: dict) -> str:
    """Every model's defaults on your-own-data files, and the fixed epochs before them
    (benchmarks/custom_defaults.json)."""
    runs = src["custom_defaults"].get("runs", [])
    by = {(r["dataset"], r["model"], r.get("config", "defaults")): r for r in runs}
    files, rows = list(dict.fromkeys(r["dataset"] for r in runs)), []

    def text(r: dict | None) -> str:
        if r is None:
            return "–"
        ece = f"{r['ece']:.3f}" if r.get("ece") is not None else "n/a"
        return f"{100 * r['acc']:.2f} / {ece}"

    for m in dict.fromkeys(r["model"] for r in runs):
        cells = []
        for d in files:
            now, before = by.get((d, m, "defaults")), by.get((d, m, "before"))
            cells.append(
                text(now)
                + (f" ({now['epochs']} ep; before {before['epochs']} ep: {text(before)})" if now and before else "")
            )
        rows.append([f"`{m}`", *cells])
    return markdown_table(["model", *files], rows)


def render_figure2(src: dict) -> str:
    """The paper's Figure 2 on the two moons (figures/figure2.json, ``python -m mnp.tools.figures.figure2 --out figures``)."""
    rows = [
        [name, f"{v['acc']:.3f}", f"{v['unc_id']:.3f}", f"{v['unc_ood']:.3f}"] for name, v in src["figure2"].items()
    ]
    header = ["attention", "test acc", "mean uncertainty, test set", "uncertainty at the OOD point (−2, 2)"]
    return markdown_table(header, rows)


def render_depgraph(src: dict) -> str:
    """The package import graph (``python -m mnp.tools.docgen.depgraph --mermaid``): edge labels count module imports."""
    from mnp.tools.docgen import depgraph

    mods = depgraph.modules()
    pkg = depgraph.package_edges(depgraph.edges(mods), mods)
    return "\n".join(
        ["```mermaid", "graph LR", *(f"  {a} -->|{len(w)}| {b}" for (a, b), w in sorted(pkg.items())), "```"]
    )


def render_model_keys(src: dict) -> str:
    """Each model class's numeric keys and the values they accept: the domains the class declares next to its
    constructor (``domains``, mnp.framework.domains), which its constructor and the config validation check."""
    from collections.abc import Mapping

    from hydra.utils import get_class
    from omegaconf import OmegaConf

    confs = {p.stem: OmegaConf.load(p) for p in sorted((ROOT / "conf" / "model").glob("*.yaml"))}
    names: dict[type, list[str]] = {}
    for name, node in confs.items():  # a config without a target extends the first of its defaults (mnp_official)
        target = node.get("_target_") or confs[node.defaults[0]]["_target_"]
        names.setdefault(get_class(target), []).append(f"`{name}`")

    def flat(domains: Mapping, prefix: str = ""):  # a part's domains (MNP, mnp.model.parts) as dotted keys
        for key, domain in domains.items():
            yield from flat(domain, f"{prefix}{key}.") if isinstance(domain, Mapping) else [(prefix + key, domain)]

    rows = [
        [", ".join(models) if i == 0 else "", f"`{key}`", domain.text()]
        for cls, models in names.items()
        for i, (key, domain) in enumerate(flat(cls.domains))
    ]
    return markdown_table(["model", "key", "accepts"], rows)


def render_noise_curves(src: dict) -> str:
    """Accuracy % per σ of MNP and MGP with the ceiling, per dataset (figures/noise_curves.json, the figure's numbers)."""
    data = src["noise_curves"]
    sigmas = next(iter(next(iter(data.values()))["models"].values()))["sigma"] if data else []
    rows = []
    for d, panel in data.items():
        for m in ("mnp", "mgp"):
            if (c := panel["models"].get(m)) is not None:
                rows.append([dataset_label(d), model_label(m), *(f"{a:.1f}" for a in c["acc"]), c["n"]])
        if ceil := panel["ceiling"]:
            ceiling = f"ceiling ({model_label(ceil['model'])}, noised views removed)"
            rows.append([dataset_label(d), ceiling, *(f"{ceil['acc']:.1f}" for _ in sigmas), ceil["n"]])
    return markdown_table(["dataset", "model", *(f"{s:.3g}" for s in sigmas), "seeds"], rows)


def render_view_weighting(src: dict) -> str:
    """Eq. 8 against eq. 8′ at test time on the same trained runs (benchmarks/view_weighting_<dataset>.json)."""
    rows = []
    for d in DATASETS:
        if (bench := src["view_weighting"].get(d)) is None:
            continue
        for name, m in bench["mean"].items():
            high = [v for k, v in m.items() if k.startswith("noise/acc@") and float(k.split("@")[1]) >= 1]
            rows.append(
                [dataset_label(d), name, f"{100 * m['test/acc']:.2f}", f"{m['test/ece']:.3f}",
                 f"{100 * m['noise/acc_mean']:.2f}", f"{100 * sum(high) / len(high):.1f}",
                 f"{100 * m['missing/acc_subsets_mean']:.1f}", len(bench["seeds"])]
            )  # fmt: skip
    header = [
        "dataset",
        "view weighting",
        "acc %",
        "ECE",
        "noisy acc %",
        "acc % at σ ≥ 1",
        "noised views removed, acc %",
    ]
    return markdown_table([*header, "seeds"], rows)


RENDERERS = {
    "goals": render_goals,
    "switches": render_switches,
    "custom_defaults": render_custom_defaults,
    "figure2": render_figure2,
    "depgraph": render_depgraph,
    "goals_summary": render_goals_summary,
    "model_keys": render_model_keys,
    "noise_curves": render_noise_curves,
    "view_weighting": render_view_weighting,
    **docgen_results.RENDERERS,
    **docgen_ceiling.RENDERERS,
    **docgen_speed.RENDERERS,
    **docgen_decisions.RENDERERS,
    **docgen_tuning.RENDERERS,
    **docgen_tuned.RENDERERS,
    **docgen_conformal.RENDERERS,
    **docgen_differences.RENDERERS,
}


# ---------------------------------------------------------------------------- files
def row_tested(rows: list[dict], root: Path) -> list[dict]:
    """The claims with their test on the test rows, where ``root/predictions`` archives both models' runs."""
    add_row_tests(rows, root)
    return rows


def sources(root: Path = ROOT) -> dict:
    """Everything the renderers read; a file that cannot be read is a :class:`SourceError` naming it."""
    main_dir, cal_dir = root / "results" / "paper_main", root / "results" / "calibration"
    has_cal = (cal_dir / "runs.csv").is_file()
    paper_main = _read(main_dir / "results.csv", read_results)
    records = _read(main_dir / "runs.csv", read_runs) if (main_dir / "runs.csv").is_file() else {}
    cal_records = _read(cal_dir / "runs.csv", read_runs) if has_cal else {}
    bench = root / "benchmarks" / "custom_defaults.json"
    return {
        "records": records,
        "calibration_records": cal_records,
        "calibration": _read(cal_dir / "results.csv", read_results) if has_cal else {},
        "calibration_claims": claims(cal_records, _read(cal_dir / "results.csv", read_cells)) if has_cal else [],
        "paper_main": paper_main,
        "claims": row_tested(claims(records, _read(main_dir / "results.csv", read_cells)), main_dir)
        if paper_main
        else [],
        "noise_curves": noise_figure.curves(paper_main),
        "view_weighting": {
            p.stem.removeprefix("view_weighting_"): _read(p, _json)
            for p in sorted((root / "benchmarks").glob("view_weighting_*.json"))
        },
        "switches": _read(root / "results" / "switches" / "results.csv", read_results),
        "digits_c": _read(root / "results" / "digits_c" / "results.csv", read_results),
        "custom_defaults": _read(bench, _json) if bench.exists() else {},
        "figure2": _read(root / "figures" / "figure2.json", _json),
        **docgen_speed.sources(root),
        "tuning": docgen_tuning.sources(root),
        **docgen_tuned.sources(root),
        **docgen_decisions.sources(root),
        **docgen_conformal.sources(root),
        **docgen_differences.sources(root),
    }


def _read(path: Path, reader):
    with reading(path):
        return reader(path)


def _json(path: Path):
    return json.loads(path.read_text())


def render_file(text: str, src: dict, name: str = "the file") -> str:
    """``text`` (of the doc file ``name``) with each generated block rendered anew; :class:`SourceError` for a block
    of no renderer, an opening without its closing line, or sources a renderer cannot use."""
    closed = {m.start() for m in BLOCK.finditer(text)}
    for m in OPENING.finditer(text):
        if m.start() not in closed:
            raise SourceError(
                f"{name}, line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)} has no <!-- /generated:{m.group(1)} --> "
                "after it; end the block with that line"
            )

    def sub(m: re.Match) -> str:
        block = m.group(2)
        if block not in RENDERERS:
            raise SourceError(f"{name}: unknown generated block '{block}'; known: {', '.join(RENDERERS)}")
        try:
            return f"{m.group(1)}{RENDERERS[block](src)}\n{m.group(4)}"
        except SourceError:
            raise
        except (ValueError, KeyError, TypeError) as e:  # a source that reads but holds what the renderer cannot use
            raise SourceError(
                f"{name}: block '{block}' cannot be rendered from its sources ({type(e).__name__}: {e})"
            ) from None

    return BLOCK.sub(sub, text)


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m mnp.tools.docgen", description="Regenerate the results blocks of README.md and docs/*.md."
    )
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a block is out of date")
    args = ap.parse_args(argv)
    try:
        src, stale, rendered = sources(ROOT), [], {}
        for path in doc_files(ROOT):
            with reading(path):
                text = path.read_text()
            rendered[path] = text, render_file(text, src, path.relative_to(ROOT).as_posix())
        figure = ROOT / "figures" / "noise_curves.json"
        figure_stale = not figure.is_file() or _read(figure, _json) != src["noise_curves"]
        conformal = docgen_conformal.stale_figure(ROOT, src)
    except SourceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for path, (text, new) in rendered.items():  # written only once every file rendered
        if new != text:
            stale.append(path.relative_to(ROOT).as_posix())
            if not args.check:
                path.write_text(new)
    if figure_stale:
        stale.append(figure.relative_to(ROOT).as_posix())
        if not args.check:
            noise_figure.write()
    if conformal is not None:
        stale.append(conformal.relative_to(ROOT).as_posix())
        if not args.check:
            conformal_figure.write()
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run python -m mnp.tools.docgen", file=sys.stderr)
        return 1
    print(("updated: " + ", ".join(stale)) if stale and not args.check else "docs are up to date")
    return 0
