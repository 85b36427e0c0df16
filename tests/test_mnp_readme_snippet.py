"""The plain-Python usage snippet quoted verbatim in the README runs and learns."""
import numpy as np
import pytest

SNIPPET = '''
import numpy as np
import pytorch_lightning as pl
from datamodules import TensorDataModule
from mnp.model import MNP

pl.seed_everything(0)
rng = np.random.default_rng(0)
y = rng.integers(0, 3, 300)                                        # labels 0..K-1
views = [rng.normal(size=(300, d)) + y[:, None] for d in (8, 5)]   # M = 2 views, each N × d^m
train_idx, test_idx = np.arange(240), np.arange(240, 300)

model = MNP(num_classes=3, view_dims=[8, 5], d_e=64, memory_size=30)   # paper switches (see MNP's docstring)
dm = TensorDataModule(views, y, train_idx, test_idx, batch_size=60)
pl.Trainer(max_epochs=10, logger=False, enable_checkpointing=False).fit(model, dm)

probs, uncertainty = model.predict_proba([v[test_idx] for v in views])  # (60, 3), (60,)
print("test accuracy", (probs.argmax(1).numpy() == y[test_idx]).mean())
'''


pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread is fastest on 2 shared cores


def test_readme_snippet_runs_and_learns():
    namespace: dict = {}
    exec(compile(SNIPPET, "README snippet", "exec"), namespace)
    probs, unc, y, test_idx = namespace["probs"], namespace["uncertainty"], namespace["y"], namespace["test_idx"]
    assert probs.shape == (60, 3) and unc.shape == (60,)
    assert np.allclose(probs.sum(1).numpy(), 1, atol=1e-5)
    assert (probs.argmax(1).numpy() == y[test_idx]).mean() > 0.7  # chance is 1/3
