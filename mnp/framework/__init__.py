"""What every model subclasses or calls: the evaluation routine (``Routine``), ``predict_proba``'s array, the
optimisers and learning-rate schedules, the numeric keys' declared domains."""
