"""Multimodal Neural Processes: the model, the shared evaluation routine and the experiment pipeline."""
