"""The tools: reports, plots, docs generation, benchmarks and diagnosis."""
