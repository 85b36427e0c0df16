"""The configs' Hydra resolvers (``${mnp_run_suffix:...}`` and the others), registered by the entry points."""

from __future__ import annotations

from omegaconf import OmegaConf

from mnp.checks import is_int
from mnp.cli.resources import gpu_jobs
from mnp.runs.dirname import eval_dir, run_suffix
from mnp.runs.places import experiment_dir_name
from mnp.runs.runrecord import pending_subdir

RESOLVER = "mnp_run_suffix"
EVAL_RESOLVER = "mnp_eval_dir"
PENDING_RESOLVER = "mnp_pending_record"
JOBS_RESOLVER = "mnp_gpu_jobs"
WARMUP_RESOLVER = "mnp_warmup"
EXPERIMENT_RESOLVER = "mnp_experiment"


def register_resolver() -> None:
    """The configs' resolvers: ``${mnp_run_suffix:${hydra.overrides.task}}`` in conf/hydra/default.yaml,
    ``${mnp_eval_dir:${ckpt_path},${eval},${data_dir},${model},${output_dir}}`` in conf/evaluate.yaml, ``${mnp_pending_record:}`` in conf/train.yaml,
    ``${mnp_gpu_jobs:}`` in conf/launcher/gpu_joblib.yaml (mnp.cli.resources), ``${mnp_warmup:W,E}`` in
    conf/model_dataset/ and ``${mnp_experiment:${experiment_name}}`` in conf/hydra/default.yaml (mnp.runs.places)."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, lambda overrides: run_suffix(list(overrides or [])))
    if not OmegaConf.has_resolver(EVAL_RESOLVER):
        OmegaConf.register_new_resolver(EVAL_RESOLVER, eval_dir)
    if not OmegaConf.has_resolver(PENDING_RESOLVER):
        OmegaConf.register_new_resolver(PENDING_RESOLVER, pending_subdir)
    if not OmegaConf.has_resolver(JOBS_RESOLVER):
        OmegaConf.register_new_resolver(JOBS_RESOLVER, gpu_jobs)
    if not OmegaConf.has_resolver(WARMUP_RESOLVER):
        OmegaConf.register_new_resolver(WARMUP_RESOLVER, scaled_warmup)
    if not OmegaConf.has_resolver(EXPERIMENT_RESOLVER):
        OmegaConf.register_new_resolver(EXPERIMENT_RESOLVER, experiment_dir_name)


def scaled_warmup(warmup: int, of: int, *, _root_) -> int:
    """``${mnp_warmup:W,E}``: a dataset's W warm-up epochs of its E. A ``trainer.max_epochs`` that leaves no epoch
    after them (a run shortened for a quick try, or a sweep's shared ``trainer.max_epochs``) scales the warm-up
    to the same share W/E of the shorter run, keeping at least one main epoch."""
    epochs = OmegaConf.select(_root_, "trainer.max_epochs")
    if not is_int(epochs) or epochs < 1 or epochs > warmup:
        return int(warmup)  # a bad trainer.max_epochs is the validation's to report
    return max(min(round(warmup * epochs / of), epochs - 1), 0)
