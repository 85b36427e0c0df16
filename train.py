"""Train and test one model on one dataset: ``python train.py model=mnp dataset=pie seed=0``."""
import hydra
from omegaconf import DictConfig

from mnp.cli import main_guarded, run_guarded


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig):
    from mnp.pipeline import train
    return run_guarded(train, cfg)


if __name__ == "__main__":
    main_guarded(main)
