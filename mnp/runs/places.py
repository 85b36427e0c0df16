"""Places the user names: an experiment's name and evaluate.py's ``output_dir`` never leave, or land inside, the
folders the project keeps its runs in."""

from __future__ import annotations

from pathlib import Path


def experiment_dir_name(name) -> str:
    """``${mnp_experiment:${experiment_name}}`` in conf/hydra/default.yaml: ``experiment_name`` as one folder name
    under ``paths.log_dir``; one with ``/``, ``\\`` or ``..`` is refused (a ValueError naming it) before Hydra makes
    any folder: ``../../x`` wrote the run outside ``paths.log_dir``."""
    name = str(name)
    if not name or any(bad in name for bad in ("/", "\\", "..")) or name.startswith("."):
        raise ValueError(
            f"experiment_name={name!r} must be one folder name under paths.log_dir (no '/', '\\', '..' or leading "
            "'.'); to write elsewhere, set paths.log_dir"
        )
    return name


def _is_run(folder: Path) -> bool:
    return (folder / "checkpoints").is_dir()


def check_output_dir(out_dir) -> None:
    """evaluate.py's ``output_dir``: refused (a ValueError naming it) inside a training run, but for the run's own
    ``eval``/``eval_*`` folders, or holding training runs (within three levels: ``logs/``, an experiment, its
    ``runs/``): an evaluation wrote into a run's ``csv/`` and into an experiment's ``runs/`` (round 5's E1, E2)."""
    out = Path(out_dir).expanduser().resolve()
    for parent in out.parents:
        if _is_run(parent) and not (out.parent == parent and (out.name == "eval" or out.name.startswith("eval_"))):
            raise ValueError(
                f"output_dir {out_dir} is inside the training run {parent}, which an evaluation writes into only "
                "through its eval_* folders; leave output_dir unset (the evaluation goes into the run's eval_* "
                "folder) or choose a folder outside any run"
            )
    held = (
        p.parent for pattern in ("*/checkpoints", "*/*/checkpoints", "*/*/*/checkpoints") for p in out.glob(pattern)
    )
    run = next((p for p in held if p.is_dir()), None)
    if run is not None:
        raise ValueError(
            f"output_dir {out_dir} holds training runs ({run.relative_to(out)}); an evaluation writes into a folder "
            "of its own: choose another output_dir"
        )
