"""Baselines compared with MNP (docs/method.md §3); each is a :class:`mnp.framework.routine.Routine` subclass."""
