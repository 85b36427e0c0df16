"""Train and test one model on one dataset: ``python train.py model=mnp dataset=pie seed=0``."""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from mnp.cli.cli import main_guarded, run_guarded
from mnp.cli.resolvers import register_resolver

register_resolver()  # run directory names in conf/hydra/default.yaml; here, so sweep workers get it too


@hydra.main(version_base="1.3", config_path=str(Path(__file__).resolve().parent / "conf"), config_name="train")
def main(cfg: DictConfig):
    from mnp.cli.pipeline import train

    return run_guarded(train, cfg)


def cli() -> None:
    """The command (``python train.py`` or ``mnp-train``): help, or the guarded Hydra run."""
    from mnp.cli.help import train_help, wants_help

    if wants_help(sys.argv[1:]):
        print(train_help(), end="")
        sys.exit(0)
    main_guarded(main)


if __name__ == "__main__":
    cli()
