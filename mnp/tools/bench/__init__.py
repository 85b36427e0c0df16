"""The speed benchmark (``python -m mnp.tools.bench``): its cases, measurements, scaling, profile, sweep estimate
and tables (``bench_*``), and what stands between a training step and one CUDA graph (``step_metrics``)."""
