"""The tools, one subpackage per job: report, docgen, bench, figures, diagnose, select; and
``build_features`` (the CIFAR10-C feature cache)."""
