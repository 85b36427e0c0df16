"""Why a trained MNP is or is not robust to noisy views (``python -m mnp.tools.diagnose``), and the committed
diagnosis figures (``diagnose_figures``)."""
