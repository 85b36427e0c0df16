"""Multimodal Neural Processes: the model, the shared evaluation routine and the experiment pipeline."""
from mnp.rundir import register_resolver

register_resolver()  # run directory names in conf/hydra/default.yaml
