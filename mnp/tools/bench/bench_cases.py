"""The benchmark's cases (``python -m mnp.tools.bench``): the datasets (the real ones, and synthetic data with the
shapes of the large ones), the models built from their per-dataset configs, and the MLP floor."""

from __future__ import annotations

import copy
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mnp.framework.optim import make_optimizer
from mnp.framework.routine import Routine
from mnp.model.decoder import Decoder
from mnp.model.encoders import LEAKY_SLOPE
from mnp.runs.migrations import merge_into, nest_flat

CONF = Path(__file__).resolve().parents[3] / "conf"
REAL = ("handwritten", "cub", "pie", "scene15")
SHAPES = {
    "caltech101": ((4096, 4096), 101, 8677),
    "hmdb": ((1000, 1000), 51, 6718),
    "cifar10c": ((2048, 2048, 2048), 10, 50000),
}
DATASETS = REAL + tuple(SHAPES)
MODELS = ("mnp", "mgp", "mlp")
OPTIONAL_MODELS = ("mnp_ref", "mnp_graph")  # MNP's straightforward reference implementation (fast=False): before/after
BATCH, EVAL_BATCH = 200, 1000


# ---------------------------------------------------------------------------- the MLP floor
class MLPFloor(Routine):
    """The cheapest model with MNP's widths: the same per-modality input projections (Linear d^m → d_e +
    LeakyReLU), their mean, and MNP's decoder widths (FC d_e → d_e/2, norm, FC 2K; the first K outputs
    are the logits). No context, attention or Monte Carlo samples: MNP's time over this is its cost of
    being a neural process."""

    def __init__(
        self,
        num_classes,
        view_dims,
        d_e: int = 512,
        norm: str = "layer",
        norm_eps: float = 1e-5,
        bn_momentum: float = 0.1,
        optim: dict | None = None,
    ):
        super().__init__(num_classes, view_dims)
        self.projections = nn.ModuleList(
            nn.Sequential(nn.Linear(d, d_e), nn.LeakyReLU(LEAKY_SLOPE)) for d in self.view_dims
        )
        self.decoder = Decoder(d_e, self.num_classes, norm, norm_eps, bn_momentum)
        self.optim_cfg = dict(optim or {})

    def logits(self, views):
        h = torch.stack([p(v) for p, v in zip(self.projections, views)]).mean(0)
        return self.decoder(h)[0]

    def training_loss(self, views, y):
        logits = self.logits(views)
        return F.cross_entropy(logits.float(), y), {}

    def predict(self, views):
        probs = self.logits(views).float().softmax(-1)
        return probs[None], -(probs * probs.clamp_min(1e-12).log()).sum(-1)

    def configure_optimizers(self):
        fused = all(p.device.type in ("cpu", "cuda") for p in self.parameters()) or None
        return make_optimizer(self.parameters(), max_epochs=1, **{"fused": fused, **self.optim_cfg})


# ---------------------------------------------------------------------------- configs and data
def compose_cfg(model: str, dataset: str, overrides: tuple[str, ...] = ()) -> dict:
    """The resolved ``train.yaml`` for (model, dataset), as plain containers."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from mnp.cli.validate import resolve_auto

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "train", overrides=[f"model={model}", f"dataset={dataset}", "logger=none", "paths.output_dir=.", *overrides]
        )
    GlobalHydra.instance().clear()
    resolve_auto(cfg)
    return OmegaConf.to_container(cfg, resolve=False) | {
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "trainer": OmegaConf.to_container(cfg.trainer, resolve=True),
    }


def compose_model_cfg(model: str, dataset: str, overrides: tuple[str, ...] = ()) -> dict:
    """The resolved ``model`` node of ``train.yaml`` for (model, dataset), without its ``name``."""
    node = compose_cfg(model, dataset, overrides)["model"]
    node.pop("name", None)
    return node


def build_model(name: str, dataset: str, num_classes: int, view_dims, extra: dict | None = None) -> Routine:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    if name == "mlp":
        m = nest_flat(merged(compose_model_cfg("mnp", dataset), extra))  # mnp's widths; flat names of old are read too
        enc = m["encoder"]
        return MLPFloor(
            num_classes,
            view_dims,
            d_e=enc["d_e"],
            norm=enc["norm"],
            norm_eps=enc["norm_eps"],
            bn_momentum=enc["bn_momentum"],
            optim={k: v for k, v in m["optim"].items() if k not in ("clip_norm", "lengthscale_lr_scale")},
        )
    node = compose_model_cfg("mnp" if name in ("mnp_ref", "mnp_graph") else name, dataset)
    if name in ("mnp", "mnp_ref", "mnp_graph"):
        node["warmup"]["epochs"] = 0  # time the main stage
        node["fast"] = name != "mnp_ref"
        node = nest_flat(merged(node, extra))
    else:
        node = merged(node, extra)
    return instantiate(OmegaConf.create(node), num_classes=num_classes, view_dims=list(view_dims), _convert_="all")


def merged(node: dict, extra: dict | None) -> dict:
    """A copy of ``node`` with the (nested) settings of ``extra`` put in, depth first."""
    out = copy.deepcopy(node)
    merge_into(out, extra or {})
    return out


def set_dotted(node: dict, key: str, value) -> None:
    """``node[a][b] = value`` for the dotted ``key`` ``a.b`` (``--set mnp.encoder.d_e=256``)."""
    *parents, last = key.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value


def first_optimizer(model: Routine):
    opt = model.configure_optimizers()
    opt = opt[0] if isinstance(opt, (list, tuple)) else opt
    return opt["optimizer"] if isinstance(opt, dict) else opt


@dataclass
class Case:
    """One dataset's data: the datamodule (its rows may be a bounded subset) and the full sizes."""

    name: str
    dm: pl.LightningDataModule
    n_train_full: int
    n_test_full: int
    synthetic: bool
    test_views: list[Tensor] = field(default_factory=list)


def synthetic_views(dims, k: int, rows: int, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """Class-clustered Gaussian views (unit-variance features), labels cycling over the K classes."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(rows) % k
    y = y[torch.randperm(rows, generator=g)]
    views = [
        ((torch.randn(k, d, generator=g)[y] + torch.randn(rows, d, generator=g)) / math.sqrt(2)).numpy() for d in dims
    ]
    return views, y.numpy()


def load_case(name: str, max_train_rows: int | None, max_test_rows: int | None, data_dir: str | None) -> Case | None:
    """The dataset's rows: synthetic shapes hold ``max_train_rows`` training rows (enough for the timed
    batches) and ``max_test_rows`` test rows; real datasets are bounded in test rows only."""
    from datamodules import TensorDataModule

    if name in SHAPES:
        dims, k, n = SHAPES[name]
        n_test = round(0.2 * n)
        n_train = n - n_test
        tr = min(n_train, max_train_rows or n_train)
        tr = max(tr, min(n_train, 8 * k))  # enough rows of every class for the context memory
        te = min(n_test, max_test_rows or n_test)
        views, y = synthetic_views(dims, k, tr + te)
        dm = TensorDataModule(
            views,
            y,
            np.arange(tr),
            np.arange(tr, tr + te),
            batch_size=BATCH,
            eval_batch_size=EVAL_BATCH,
            scaling="none",
        )
        dm.setup("fit")
        return Case(name, dm, n_train, n_test, True)
    from datamodules.errors import DataError
    from datamodules.features import FeatureDataModule

    root = data_dir or os.environ.get("MNP_DATA_DIR") or str(Path.home() / ".cache/mnp/data")
    scaling = compose_dataset_scaling(name)
    dm = FeatureDataModule(name, root, download=False, batch_size=BATCH, eval_batch_size=EVAL_BATCH, scaling=scaling)
    try:
        dm.setup("fit")
    except (DataError, FileNotFoundError, OSError) as e:
        print(f"skipping {name}: {str(e).splitlines()[0]}", file=sys.stderr)
        return None
    n_train, n_test = len(dm.train_y), len(dm.test_y)
    if max_test_rows and n_test > max_test_rows:  # --quick: the first test rows, extrapolated
        dm.test_views, dm.test_y = [v[:max_test_rows] for v in dm.test_views], dm.test_y[:max_test_rows]
    return Case(name, dm, n_train, n_test, False)


def compose_dataset_scaling(name: str) -> str:
    from datamodules.sources import DATASETS as SPECS

    return SPECS[name].scaling
