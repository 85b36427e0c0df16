"""Re-run the full evaluation of a checkpoint: ``python evaluate.py ckpt_path=<path/to/last.ckpt>``."""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from mnp.cli.cli import main_guarded, run_guarded
from mnp.cli.resolvers import register_resolver

register_resolver()  # run directory names in conf/hydra/default.yaml; here, so sweep workers get it too


@hydra.main(version_base="1.3", config_path=str(Path(__file__).resolve().parent / "conf"), config_name="evaluate")
def main(cfg: DictConfig):
    from mnp.cli.pipeline import evaluate

    return run_guarded(evaluate, cfg)


def cli() -> None:
    """The command (``python evaluate.py`` or ``mnp-eval``): help, or the guarded Hydra run."""
    from mnp.cli.help import evaluate_help, wants_help

    if wants_help(sys.argv[1:]):
        print(evaluate_help(), end="")
        sys.exit(0)
    main_guarded(main, evaluation=True)


if __name__ == "__main__":
    cli()
