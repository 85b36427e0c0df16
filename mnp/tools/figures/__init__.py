"""The committed figures of the docs: the paper's Figure 2 (``figure2``), the noise curves (``noise_figure``) and the
conformal study's curves (``conformal_figure``)."""
