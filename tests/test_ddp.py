"""trainer=ddp for real: two CPU processes (gloo, ddp_spawn) train MNP through the pipeline; the dynamic
context memory must be identical on both ranks after training, each rank must see its own shard of the
training set with the same number of batches, and the run must write its outputs once."""

import json
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import torch.distributed as dist
from cfg_utils import compose_train

from mnp.cli.pipeline import train


class DumpRank(pl.Callback):
    """Saves, per rank, the memory at the start and end of training and the batches of the last epoch."""

    def __init__(self, out: str):
        self.out, self.rows, self.start = out, [], None

    def on_train_start(self, trainer, pl_module):
        self.start = {k: v.detach().cpu().clone() for k, v in pl_module.memory.state_dict().items()}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.current_epoch == trainer.max_epochs - 1:
            self.rows.append(batch[0][0].detach().cpu().clone())

    def on_train_end(self, trainer, pl_module):
        torch.save(
            {
                "start": self.start,
                "end": {k: v.detach().cpu().clone() for k, v in pl_module.memory.state_dict().items()},
                "rows": self.rows,
                "world_size": trainer.world_size,
                "backend": dist.get_backend(),
            },
            Path(self.out) / f"rank{trainer.global_rank}.pt",
        )


@pytest.mark.slow
def test_ddp_two_cpu_ranks_keep_identical_context_memories(tmp_path):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    # 201 training samples: an odd count, so the shards need padding to give both ranks 2 batches of ≤ 100
    cfg = compose_train(
        tmp_path / "run",
        [
            "model=mnp",
            "trainer=ddp",
            "trainer.accelerator=cpu",
            "trainer.devices=2",
            "trainer.max_epochs=3",
            "dataset.num_views=2",
            "dataset.n_train=201",
            "dataset.n_test=60",
            "dataset.batch_size=100",
            "model.encoder.d_e=16",
            "model.encoder.resmlp_depth=1",
            "model.memory.size=20",
            "model.warmup.epochs=1",
            "model.decoder.num_samples=2",
            "eval.noise_levels=[1.0]",
            "skip_if_done=false",
            "ckpt_path=null",
            f"+callbacks.extra.dump={{_target_:test_ddp.DumpRank,out:{dumps}}}",
        ],
    )
    res = train(cfg)
    r0, r1 = (torch.load(dumps / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert r0["world_size"] == r1["world_size"] == 2 and r0["backend"] == "gloo"
    for m in range(2):
        key = f"x{m}"
        assert torch.equal(r0["start"][key], r1["start"][key])
        assert not torch.equal(r0["end"][key], r0["start"][key])  # the memory was updated in training
        assert torch.equal(r0["end"][key], r1["end"][key])  # ...identically on both ranks
    # sharding: same number of batches, disjoint shards (up to the one padding row) covering the training set
    assert [len(b) for b in r0["rows"]] == [len(b) for b in r1["rows"]] == [100, 1]
    seen0, seen1 = ({tuple(r.tolist()) for r in torch.cat(d["rows"])} for d in (r0, r1))
    assert len(seen0 | seen1) == 201 and len(seen0 & seen1) <= 1
    # one set of outputs, from the end state of training
    assert res["epochs"] == 3 and all(np.isfinite(res[k]) for k in ("test/acc", "test/nll", "noise/acc_mean"))
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["test/acc"] == res["test/acc"]
    last = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["epoch"] == 2 and torch.equal(last["state_dict"]["memory.x0"], r0["end"]["x0"])
    assert res["time/train_epoch_s"] > 0
