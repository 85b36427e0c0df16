"""The private APIs of Lightning and torch the project uses, each named and checked here, so that a version
past the tested ones fails in this file, loudly, not deep inside a run. pyproject.toml bounds both packages
to the tested minor versions; docs/reliability.md lists the same APIs."""

from __future__ import annotations

import inspect
import signal
import warnings
from pathlib import Path

import pytorch_lightning as pl
import tomllib
import torch
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
TESTED = {"pytorch-lightning": ("2.6.6",), "torch": ("2.11.0", "2.14.1")}  # the CPU machine, the GPU machine


def test_pyproject_bounds_lightning_and_torch_to_the_tested_minor_versions():
    deps = {
        r.name: r.specifier
        for r in map(Requirement, tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    }
    for name, versions in TESTED.items():
        assert all(deps[name].contains(v) for v in versions), (name, deps[name])
        major, minor = max(tuple(map(int, v.split(".")[:2])) for v in versions)
        assert not deps[name].contains(f"{major}.{minor + 1}.0"), f"{name} {deps[name]} admits an untested minor"
    assert deps["pytorch-lightning"].contains(pl.__version__) and deps["torch"].contains(
        torch.__version__.split("+")[0]
    )


# ---------------------------------------------------------------------------- Lightning
def test_lightning_private_apis_the_project_uses(tmp_path):
    # mnp.cli.pipeline.spawned: a ddp_spawn fit runs in child processes
    from pytorch_lightning.strategies.launchers.multiprocessing import _MultiProcessingLauncher

    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", logger=False, enable_progress_bar=False)
    assert isinstance(trainer.strategy.launcher, _MultiProcessingLauncher)

    # mnp.model.step_graphs: a replayed graph advances Lightning's optimiser-step count by these hooks
    from pytorch_lightning.core.optimizer import LightningOptimizer

    opt = LightningOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1))
    assert callable(opt._on_before_step) and callable(opt._on_after_step)

    # models and baselines: LightningModule._trainer is None before a Trainer attaches (self.trainer raises)
    assert pl.LightningModule()._trainer is None

    # mnp.runs.csv_history.keep_csv_history: the CSV writer deletes metrics.csv as it opens, and appends
    # with the header in its metrics_keys
    from lightning_fabric.loggers.csv_logs import _ExperimentWriter
    from pytorch_lightning.loggers import CSVLogger

    logger = CSVLogger(tmp_path, name="csv", version="")
    Path(logger.log_dir).mkdir(parents=True)
    (Path(logger.log_dir) / "metrics.csv").write_text("epoch\n0\n")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Experiment logs directory")
        writer = logger.experiment
    assert isinstance(writer, _ExperimentWriter) and writer.metrics_keys == []
    assert not (Path(logger.log_dir) / "metrics.csv").exists()

    # mnp.runs.signals: Lightning's SIGTERM handler calls the one installed before it, and stops the loops
    # with SIGTERMException, a SystemExit (status 0); mnp.cli.console silences this module's note of it
    from pytorch_lightning.trainer.connectors import signal_connector
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    assert issubclass(SIGTERMException, SystemExit) and SIGTERMException().code is None
    assert signal_connector.log.name == "pytorch_lightning.trainer.connectors.signal_connector"
    calls = []
    before = signal.signal(signal.SIGTERM, lambda *a: calls.append("ours"))
    try:
        connector = signal_connector._SignalConnector(pl.Trainer(accelerator="cpu", logger=False))
        connector.register_signal_handlers()
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        connector.teardown()
    finally:
        signal.signal(signal.SIGTERM, before)
    assert connector.received_sigterm and calls == ["ours"]

    # mnp.cli.wandb_utils.RunLogger: WandbLogger keeps wandb.init's kwargs in _wandb_init, anonymous among them
    from pytorch_lightning.loggers import WandbLogger

    assert WandbLogger(project="mnp", save_dir=str(tmp_path))._wandb_init["anonymous"] is None
    assert "wandb.init(**self._wandb_init)" in inspect.getsource(WandbLogger.experiment.fget)


# ---------------------------------------------------------------------------- torch
def test_torch_private_apis_the_project_uses():
    # mnp.model.training: per-tensor clipping and the L2 term
    a, b = torch.ones(2), torch.full((3,), 2.0)
    assert torch.allclose(torch.stack(torch._foreach_norm([a, b])), torch.tensor([2**0.5, 12**0.5]))
    torch._foreach_mul_([a], [torch.tensor(3.0)])
    assert a.tolist() == [3.0, 3.0] and torch._foreach_mul([b], 0.5)[0].tolist() == [1.0] * 3

    # mnp.model.training: fused Adam reads the optimiser attribute found_inf (a float tensor, GradScaler's hook)
    # and skips the whole update, step count included, while it is 1
    for flag, moved in ((1.0, False), (0.0, True)):
        p = torch.nn.Parameter(torch.ones(2))
        p.grad = torch.ones(2)
        opt = torch.optim.Adam([p], lr=0.1, fused=True)
        opt.found_inf = torch.tensor(flag)
        opt.step()
        assert opt.defaults["fused"] and bool((p != 1).all()) == moved and opt.state[p]["step"].item() == moved

    # mnp.model.context_cache, baselines.sngp: a tensor's in-place version counter
    v = b._version
    b.add_(1)
    assert b._version == v + 1

    # mnp.tools.bench.bench_measure, mnp.tools.bench.step_metrics: dispatch modes, pytrees, storages, op schemas, autograd
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    seen = []

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append((func._schema.name, torch._C._current_autograd_node() is None))
            return func(*args, **(kwargs or {}))

    with Ops():
        out = a + a
    assert ("aten::add", True) in seen
    assert tree_flatten({"x": [out]})[0][0] is out
    assert isinstance(out.untyped_storage()._cdata, int)

    # mnp.tools.bench.step_metrics: graph-break logging and dynamo's explain
    from torch import _dynamo, _logging

    assert "graph_breaks" in inspect.signature(_logging.set_logs).parameters
    assert callable(_dynamo.explain) and callable(_dynamo.reset)
