"""Multimodal Neural Processes: the MNP model in ``mnp.model``, what every model shares in ``mnp.framework``, the
evaluation in ``mnp.eval``, a run on disk in ``mnp.runs``, the entry points and pipeline in ``mnp.cli``, the tools
(reports, plots, docs generation, benchmarks, diagnosis) in ``mnp.tools`` (docs/architecture.md). ``mnp.load(run)``: a trained run as a
predictor on raw rows (:mod:`mnp.cli.predictor`)."""


def __getattr__(name):
    """``mnp.MultiViewClassifier``: every model as a scikit-learn estimator (:mod:`mnp.estimator`), imported on use."""
    if name == "MultiViewClassifier":
        from mnp.estimator import MultiViewClassifier

        return MultiViewClassifier
    raise AttributeError(f"module 'mnp' has no attribute {name!r}")


def load(run, data_dir=None):
    """The :class:`~mnp.cli.predictor.Predictor` of a run directory or checkpoint (imported on first use: a
    bare ``import mnp`` stays free of torch)."""
    from mnp.cli.predictor import load as load_run

    return load_run(run, data_dir)
