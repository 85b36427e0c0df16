"""The dynamic context memory (eqs. 2–3): initialisation, the mse/ce update for both j* modes, fifo,
random, class balance, and survival through checkpoints."""

import logging

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from mnp_utils import flat_mnp

from datamodules import TensorDataModule
from mnp.model import MNP
from mnp.model.memory import ContextMemory, gather_candidates, sample_per_class

K, NK, DIMS = 3, 4, [2, 3]


pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread is fastest on 2 shared cores


def labelled_data(n_per_class=10, dims=DIMS, k=K, seed=0):
    """Views whose first column is the class and second a unique sample id, so rows can be traced."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(k).repeat_interleave(n_per_class)
    views = []
    for d in dims:
        v = torch.randn(len(y), d, generator=g)
        v[:, 0] = y.float()
        v[:, 1] = torch.arange(len(y)).float()
        views.append(v)
    return views, y


def filled_memory(**kwargs):
    mem = ContextMemory(DIMS, K, K * NK, **kwargs)
    mem.init_from_data(*labelled_data())
    return mem


def snapshot(mem):
    return [mem.rows(m).clone() for m in range(len(DIMS))]


def test_init_from_data_is_class_balanced_without_replacement():
    torch.manual_seed(0)
    mem = filled_memory()
    assert bool(mem.initialised) and not mem.needs_data()
    for m in range(2):
        rows = mem.rows(m)
        assert rows.shape == (K, NK, DIMS[m])
        assert torch.equal(rows[..., 0], torch.arange(K)[:, None].float().expand(K, NK))  # block k holds class k
        ids = rows[..., 1].flatten()
        assert len(set(ids.tolist())) == K * NK  # no repeats
    assert torch.equal(mem.rows(0)[..., 1], mem.rows(1)[..., 1])  # same samples in every modality
    xs, labels = mem.context()
    assert xs[0].shape == (K * NK, 2) and torch.equal(labels, torch.arange(K).repeat_interleave(NK))
    assert torch.equal(xs[0][:, 0], labels.float())


def test_small_class_is_sampled_with_replacement_and_warned(caplog):
    y = torch.tensor([0] * 10 + [1] * 2 + [2] * 10)
    views = [torch.stack([y.float(), torch.arange(22).float()], 1)]
    mem = ContextMemory([2], 3, 15)  # N_K = 5 > 2 samples of class 1
    with caplog.at_level(logging.WARNING):
        mem.init_from_data(views, y)
    assert "classes [1]" in caplog.text
    assert (mem.rows(0)[1, :, 0] == 1).all() and set(mem.rows(0)[1, :, 1].tolist()) <= {10.0, 11.0}
    with pytest.raises(ValueError, match="have none"):
        sample_per_class(torch.tensor([0, 0, 2]), 3, 1)


def test_uniform_init_and_memory_size_check():
    torch.manual_seed(0)
    mem = ContextMemory(DIMS, K, 12, init="uniform")
    assert bool(mem.initialised) and mem.rows(0).abs().max() <= 1 and mem.rows(0).std() > 0.3
    with pytest.raises(ValueError, match="smaller than the number of classes"):
        ContextMemory(DIMS, K, 2)


def batch_for_update():
    """Six targets of classes 0 and 2 only (class 1 absent), ids 100..105."""
    y = torch.tensor([0, 2, 0, 2, 0, 2])
    views = [torch.stack([y.float(), 100 + torch.arange(6).float()] + [torch.zeros(6)] * (d - 2), 1) for d in DIMS]
    g = torch.Generator().manual_seed(5)
    attn_sum = torch.rand(2, K * NK, generator=g)
    err = torch.rand(2, 6, generator=g)
    return views, y, attn_sum, err


def test_update_same_class_replaces_least_attended_slot_with_worst_target_of_that_class():
    torch.manual_seed(0)
    mem = filled_memory(jstar="same_class")
    views, y, attn_sum, err = batch_for_update()
    before = snapshot(mem)
    mem.update(views, y, attn_sum, err)
    for m in range(2):
        expected = before[m].clone()
        for k in (0, 2):  # the classes present
            slot = attn_sum[m].reshape(K, NK)[k].argmin()
            members = (y == k).nonzero().flatten()
            j = members[err[m, members].argmax()]
            expected[k, slot] = views[m][j]
        assert torch.equal(mem.rows(m), expected)
        assert torch.equal(mem.rows(m)[1], before[m][1])  # class 1 absent from the batch: untouched
        assert (mem.rows(m)[..., 0] == torch.arange(K)[:, None]).all()  # class balance


def test_update_all_targets_replaces_one_slot_in_the_block_of_the_worst_target():
    torch.manual_seed(0)
    mem = filled_memory(jstar="all")
    views, y, attn_sum, err = batch_for_update()
    before = snapshot(mem)
    mem.update(views, y, attn_sum, err)
    for m in range(2):
        j = err[m].argmax()
        k = y[j]
        slot = attn_sum[m].reshape(K, NK)[k].argmin()
        expected = before[m].clone()
        expected[k, slot] = views[m][j]
        assert torch.equal(mem.rows(m), expected)
        assert (mem.rows(m) != before[m]).any(-1).sum() == 1  # exactly one row changed
        assert (mem.rows(m)[..., 0] == torch.arange(K)[:, None]).all()


@pytest.mark.parametrize("jstar", ["all", "same_class"])
def test_class_balance_survives_many_random_updates(jstar):
    torch.manual_seed(1)
    mem = filled_memory(jstar=jstar)
    views, y = labelled_data(n_per_class=30, seed=3)
    for _ in range(50):
        idx = torch.randperm(len(y))[:16]
        mem.update([v[idx] for v in views], y[idx], torch.rand(2, K * NK), torch.rand(2, 16))
    for m in range(2):
        assert mem.rows(m).shape == (K, NK, DIMS[m])
        assert (mem.rows(m)[..., 0] == torch.arange(K)[:, None]).all()


def test_fifo_overwrites_oldest_rows_per_class():
    torch.manual_seed(0)
    mem = filled_memory(update="fifo")
    before = snapshot(mem)
    y = torch.tensor([0, 2, 0])
    views = [torch.stack([y.float(), torch.tensor([100.0, 101, 102])] + [torch.zeros(3)] * (d - 2), 1) for d in DIMS]
    mem.update(views, y)
    assert mem.fifo_ptr.tolist() == [2, 0, 1]
    assert mem.rows(0)[0, :2, 1].tolist() == [100.0, 102.0] and mem.rows(0)[2, 0, 1].item() == 101.0
    assert torch.equal(mem.rows(0)[0, 2:], before[0][0, 2:]) and torch.equal(mem.rows(0)[1], before[0][1])
    # more class-0 targets than N_K: only the newest N_K survive, in queue order after the pointer
    y = torch.zeros(6, dtype=torch.long)
    views = [torch.stack([y.float(), 200 + torch.arange(6).float()] + [torch.zeros(6)] * (d - 2), 1) for d in DIMS]
    mem.update(views, y)
    assert mem.fifo_ptr.tolist() == [0, 0, 1]  # (2 + 6) % 4
    # targets 202..205 land at slots (2 + rank) % 4 = 0, 1, 2, 3 for ranks 2..5
    assert mem.rows(1)[0, :, 1].tolist() == [202.0, 203.0, 204.0, 205.0]


def test_random_rule_resamples_the_context_from_the_training_set_each_call():
    torch.manual_seed(0)
    mem = ContextMemory(DIMS, K, K * NK, update="random")
    views, y = labelled_data(n_per_class=20)
    mem.init_from_data(views, y)
    mem.attach(views, y)
    (a, _), (b, labels) = mem.context(), mem.context()
    assert not torch.equal(a[0], b[0])
    assert torch.equal(b[0][:, 0], labels.float()) and torch.equal(b[1][:, 0], labels.float())
    assert torch.equal(b[0][:, 1], b[1][:, 1])  # the same samples in every modality
    snap = snapshot(mem)
    mem.update(views[:1], y[:1])  # random never writes rows
    assert all(torch.equal(s, mem.rows(m)) for m, s in enumerate(snap))
    with pytest.raises(ValueError, match="memory.trainable"):
        ContextMemory(DIMS, K, 12, update="random", trainable=True)


def test_model_update_uses_the_training_forward_pass():
    """on_train_batch_end applies eqs. 2–3 with the attention and unimodal errors of training_loss."""
    torch.manual_seed(0)
    views, y = labelled_data(n_per_class=10)
    model = flat_mnp(num_classes=K, view_dims=DIMS, d_e=8, memory_size=K * NK, memory_jstar="same_class")
    model.init_memory(views, y)
    before = snapshot(model.memory)
    idx = torch.tensor([0, 1, 12, 25, 27])
    model.training_loss([v[idx] for v in views], y[idx])
    cached_views, cached_y, attn_sum, err = model._dcm_batch
    assert attn_sum.shape == (2, K * NK) and err.shape == (2, 5)
    model.on_train_batch_end(None, None, 0)
    assert model._dcm_batch is None
    for m in range(2):
        expected = before[m].clone()
        for k in cached_y.unique():
            members = (cached_y == k).nonzero().flatten()
            expected[k, attn_sum[m].reshape(K, NK)[k].argmin()] = views[m][idx][members[err[m, members].argmax()]]
        assert torch.equal(model.memory.rows(m), expected)


def tiny_datamodule(seed=0):
    views, y = labelled_data(n_per_class=22, seed=seed)  # 11 training samples per class
    idx = np.arange(len(y))
    return TensorDataModule([v.numpy() for v in views], y.numpy(), idx[::2], idx[1::2], batch_size=16)


@pytest.mark.parametrize("trainable", [False, True])
def test_memory_survives_a_checkpoint_round_trip(tmp_path, trainable):
    pl.seed_everything(0, verbose=False)
    kwargs = dict(
        num_classes=K,
        view_dims=DIMS,
        d_e=8,
        memory_size=K * NK,
        memory_trainable=trainable,
        memory_init="uniform" if trainable else "data",
        memory_update="fifo",
    )
    model = flat_mnp(**kwargs)
    trainer = pl.Trainer(
        max_epochs=2, default_root_dir=tmp_path, logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(model, tiny_datamodule())
    ckpt = tmp_path / "m.ckpt"
    trainer.save_checkpoint(ckpt)
    assert model.memory.fifo_ptr.any()  # fifo moved, so the pointer must travel too
    names = {f"memory.x{m}" for m in range(2)} | {"memory.initialised", "memory.fifo_ptr"}
    assert names <= set(model.state_dict())
    loaded = MNP.load_from_checkpoint(ckpt)
    for m in range(2):
        assert torch.equal(loaded.memory.rows(m), model.memory.rows(m))
    assert torch.equal(loaded.memory.fifo_ptr, model.memory.fifo_ptr) and bool(loaded.memory.initialised)
    fresh = flat_mnp(**kwargs)
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(fresh.memory.rows(1), model.memory.rows(1))
    # resuming a finished fit restores the memory and does not re-initialise it from data
    resumed = flat_mnp(**kwargs)
    pl.Trainer(
        max_epochs=2, default_root_dir=tmp_path, logger=False, enable_progress_bar=False, enable_model_summary=False
    ).fit(resumed, tiny_datamodule(), ckpt_path=ckpt)
    assert torch.equal(resumed.memory.rows(0), model.memory.rows(0))


def test_gather_candidates_merges_every_rank_and_drops_the_padding():
    """DDP: with a fake two-rank all_gather, every rank sees both ranks' targets, unpadded, in rank order."""
    local = (
        [torch.randn(5, 2), torch.randn(5, 3)],
        torch.tensor([0, 1, 2, 0, 1]),
        torch.rand(2, K * NK),
        torch.rand(2, 5),
    )
    remote = ([torch.randn(3, 2), torch.randn(3, 3)], torch.tensor([2, 2, 1]), torch.rand(2, K * NK), torch.rand(2, 3))
    pad = torch.nn.functional.pad
    answers = iter(
        [
            torch.tensor([5, 3]),
            [torch.stack([a, pad(b, (0, 0, 0, 2))]) for a, b in zip(local[0], remote[0])],
            torch.stack([local[1], pad(remote[1], (0, 2), value=-1)]),
            torch.stack([local[3], pad(remote[3], (0, 2))]),
            torch.stack([local[2], remote[2]]),
        ]
    )
    views, y, attn_sum, err = gather_candidates(lambda data: next(answers), 2, *local)
    for m in range(2):
        assert torch.equal(views[m], torch.cat([local[0][m], remote[0][m]]))
    assert torch.equal(y, torch.cat([local[1], remote[1]]))
    assert torch.equal(err, torch.cat([local[3], remote[3]], 1))
    assert torch.allclose(attn_sum, local[2] + remote[2])
