"""The tuning experiment: every model tuned with one budget by stratified k-fold cross-validation on the training
rows (docs/tuning.md). :mod:`.space` reads a declared search space, :mod:`.study` runs the Optuna study through
Hydra's launcher (the sweeper in ``hydra_plugins/mnp_tune_sweeper``), :mod:`.records` writes its records and the
per-dataset config of the winner."""
