"""The plain-Python usage snippet of the README, read out of README.md, runs and learns."""

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_snippet() -> str:
    """The first python block of the README's "From Python" section, as a user would copy it."""
    text = README.read_text()
    section = text[text.index("## From Python") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


SNIPPET = readme_snippet()


pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread is fastest on 2 shared cores


def test_readme_snippet_runs_and_learns():
    namespace: dict = {}
    exec(compile(SNIPPET, "README snippet", "exec"), namespace)
    probs, unc, y, test_idx = namespace["probs"], namespace["uncertainty"], namespace["y"], namespace["test_idx"]
    assert probs.shape == (60, 3) and unc.shape == (60,)
    assert np.allclose(probs.sum(1), 1, atol=1e-5)
    assert (probs.argmax(1) == y[test_idx]).mean() > 0.7  # chance is 1/3
    missing = namespace["probs_v0"]  # view 1 missing in every row
    assert missing.shape == (60, 3) and np.allclose(missing.sum(1), 1, atol=1e-5)
    assert (namespace["probs_v0"].argmax(1) == y[test_idx]).mean() > 0.6
