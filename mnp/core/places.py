"""Places the user names: an experiment's name and evaluate.py's ``output_dir`` never leave, or land inside, the
folders the project keeps its runs in."""

from __future__ import annotations


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
