"""Baselines compared with MNP (SPEC §3); each is a :class:`mnp.routine.Routine` subclass."""
