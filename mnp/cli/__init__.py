"""The entry points and the pipeline they run: train, evaluate and ``mnp.load``, the builders from config groups,
config validation, sweeps, the console, progress and wandb."""
