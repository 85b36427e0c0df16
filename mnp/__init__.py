"""Multimodal Neural Processes: the MNP model here, the framework every model shares in ``mnp.core``, the tools
(reports, plots, docs generation, benchmarks, diagnosis) in ``mnp.tools``. ``mnp.load(run)``: a trained run as a
predictor on raw rows (:mod:`mnp.core.predictor`)."""


def __getattr__(name):
    """``mnp.MultiViewClassifier``: every model as a scikit-learn estimator (:mod:`mnp.estimator`), imported on use."""
    if name == "MultiViewClassifier":
        from mnp.estimator import MultiViewClassifier

        return MultiViewClassifier
    raise AttributeError(f"module 'mnp' has no attribute {name!r}")


def load(run, data_dir=None):
    """The :class:`~mnp.core.predictor.Predictor` of a run directory or checkpoint (imported on first use: a
    bare ``import mnp`` stays free of torch)."""
    from mnp.core.predictor import load as load_run

    return load_run(run, data_dir)
