"""Re-run the full evaluation of a checkpoint: ``python evaluate.py ckpt_path=<path/to/last.ckpt>``."""
import hydra
from omegaconf import DictConfig

from mnp.cli import main_guarded, run_guarded


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig):
    from mnp.pipeline import evaluate
    return run_guarded(evaluate, cfg)


if __name__ == "__main__":
    main_guarded(main)
