"""Multimodal Neural Processes: the MNP model here, the framework every model shares in ``mnp.core``, the tools
(reports, plots, docs generation, benchmarks, diagnosis) in ``mnp.tools``."""
