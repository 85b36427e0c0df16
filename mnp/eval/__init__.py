"""Evaluation: the metrics, the noise and missing-view protocols, the ``eval:`` node as one object, per-view scores,
the post-hoc calibrators and conformal sets, figures and wandb tables."""
