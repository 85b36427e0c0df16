"""The framework every model shares: the evaluation routine, metrics, the experiment pipeline and the CLI."""
