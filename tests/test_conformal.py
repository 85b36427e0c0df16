"""Split conformal prediction sets (docs/method.md §5.7, ``eval.conformal=thr|aps|raps``): the finite-sample
coverage on exchangeable draws, agreement with MAPIE's THR (LAC), APS and RAPS on the same probabilities and
uniform draws, the test loop's keys, the refusals, and ``mnp.load(run).predict_set``."""

import json
import warnings

import numpy as np
import pytest
import torch
from cfg_utils import compose_train, evaluate_config
from test_calibration import Overconfident, logit_module, run_test
from test_posthoc import Identity, Rows

from mnp.cli.pipeline import train
from mnp.cli.validate import ConfigError, check_eval, validate
from mnp.eval.conformal import SplitConformal, quantile_rank
from mnp.eval.eval_protocol import EvalProtocol
from mnp.eval.posthoc import PostHoc

pytestmark = pytest.mark.usefixtures("one_thread")
ALPHA = 0.1


@pytest.mark.parametrize("method", ["thr", "aps", "raps"])
def test_coverage_holds_the_finite_sample_bounds_on_exchangeable_draws(method):
    """Labels drawn from known probabilities; 300 random calibration/test splits of 4,200 rows."""
    g = torch.Generator().manual_seed(1)
    k, n, m, draws = 5, 200, 4000, 300
    probs = (1.2 * torch.randn(n + m, k, generator=g, dtype=torch.float64)).softmax(-1)
    y = torch.multinomial(probs, 1, generator=g).squeeze(-1)
    coverage = []
    for d in range(draws):
        perm = torch.randperm(n + m, generator=g)
        cal, test = perm[:n], perm[n:]
        conformal = SplitConformal(method, ALPHA, lam=0.05, k_reg=1, seed=d).fit(probs[cal], y[cal])
        sets = conformal(probs[test])
        coverage.append(sets.gather(-1, y[test, None]).double().mean().item())
    coverage = np.asarray(coverage)
    se = coverage.std() / np.sqrt(draws)
    # E[coverage] lies in [1 - alpha, 1 - alpha + 1/(n + 1)] for continuous scores (Vovk et al.; Lei et al. 2018)
    assert 1 - ALPHA - 3 * se <= coverage.mean() <= 1 - ALPHA + 1 / (n + 1) + 3 * se, (coverage.mean(), se)
    # given the calibration rows, coverage is Beta(r, n + 1 - r); each draw within its 1e-4 tails (and the test
    # rows' own binomial spread, 4 standard errors)
    from scipy.stats import beta

    r = quantile_rank(n, ALPHA)
    lo, hi = beta.ppf([1e-4, 1 - 1e-4], r, n + 1 - r)
    spread = 4 * np.sqrt(ALPHA * (1 - ALPHA) / m)
    assert ((coverage >= lo - spread) & (coverage <= hi + spread)).all(), (coverage.min(), coverage.max(), lo, hi)


def fixed_probabilities(k=6, n=300, m=400):
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.full(k, 0.7), size=n + m)
    y = np.array([rng.choice(k, p=row) for row in p])
    return p[:n], y[:n], p[n:], y[n:]


@pytest.mark.parametrize("method, reference", [("thr", "lac"), ("aps", "aps"), ("raps", "raps")])
def test_sets_qhat_and_coverage_equal_mapies(method, reference):
    """MAPIE 1.x's SplitConformalClassifier, prefit on the same probabilities: its APS and RAPS draw u from
    RandomState(random_state) and score ρ + (1 - u)·p_y, so ours get 1 - its draws. RAPS: MAPIE tunes λ and
    k_reg on a stratified tenth of the calibration rows; ours gets its λ, k_reg and the other nine tenths."""
    pytest.importorskip("mapie")
    from mapie.classification import SplitConformalClassifier
    from sklearn.model_selection import StratifiedShuffleSplit

    pc, yc, pt, yt = fixed_probabilities()
    seed = 7
    ref = SplitConformalClassifier(
        Identity(6), confidence_level=1 - ALPHA, conformity_score=reference, random_state=seed
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.conformalize(pc, yc)
        params = None if method == "thr" else {"include_last_label": "randomized"}
        ref_sets = ref.predict_set(pt, conformity_score_params=params)[1][:, :, 0]
    score = ref._mapie_classifier.conformity_score_function_
    lam, k_reg, rows = 0.0, 0, np.arange(len(yc))
    if method == "raps":
        lam, k_reg = float(score.lambda_star), int(np.ravel(score.k_star)[0])
        rows = next(StratifiedShuffleSplit(n_splits=1, test_size=None, random_state=seed).split(pc, yc))[0]
    u_cal = u_test = None
    if method != "thr":
        u_cal = torch.as_tensor(1 - np.random.RandomState(seed).uniform(size=len(rows)))
        u_test = torch.as_tensor(1 - np.random.RandomState(seed).uniform(size=(len(yt), 1))[:, 0])
    ours = SplitConformal(method, ALPHA, lam=lam, k_reg=k_reg).fit(
        torch.as_tensor(pc[rows]), torch.as_tensor(yc[rows]), u=u_cal
    )
    sets = ours(torch.as_tensor(pt), u=u_test).numpy()
    assert ours.qhat == pytest.approx(float(np.ravel(score.quantiles_)[0]), abs=1e-12)
    assert (sets == ref_sets).all() and 2 < sets.sum(1).mean() < 5
    assert sets[np.arange(len(yt)), yt].mean() == ref_sets[np.arange(len(yt)), yt].mean()


def test_raps_without_penalty_is_aps_and_a_larger_alpha_gives_smaller_sets():
    pc, yc, pt, _ = fixed_probabilities()
    aps = SplitConformal("aps", ALPHA, seed=3).fit(torch.as_tensor(pc), torch.as_tensor(yc))
    raps = SplitConformal("raps", ALPHA, lam=0.0, k_reg=0, seed=3).fit(torch.as_tensor(pc), torch.as_tensor(yc))
    assert aps.qhat == raps.qhat and torch.equal(aps(torch.as_tensor(pt)), raps(torch.as_tensor(pt)))
    wide, narrow = aps(torch.as_tensor(pt)), aps(torch.as_tensor(pt), alpha=0.3)
    assert (narrow <= wide).all() and narrow.sum() < wide.sum()
    assert aps.quantile(0.3) == aps.calibration_scores[quantile_rank(300, 0.3) - 1].item()


# ---------------------------------------------------------------------------- the test loop
def test_the_test_loop_reports_coverage_clean_noisy_and_missing():
    model = Overconfident()
    on = run_test(model, dm := logit_module(), conformal="aps", calibration="temperature")
    off = run_test(model, logit_module(), calibration="temperature")
    assert {k: v for k, v in on.items() if not k.startswith("conformal/")} == off  # nothing else moves
    assert on["conformal/method"] == "aps" and on["conformal/alpha"] == ALPHA
    assert (on["conformal/n_cal"], on["conformal/n_test"]) == (len(dm.val_y), 1000) and 490 < len(dm.val_y) < 510
    assert 0.86 < on["conformal/test/coverage"] < 0.94 and 1 < on["conformal/test/size"] < 4
    for key in (
        "noise/coverage@0.1",
        "noise/size@1",
        "noise/coverage_mean",
        "missing/coverage@v0",
        "missing/size_mean",
    ):
        assert np.isfinite(on[f"conformal/{key}"]), key
    # view 0 carries the logits: without it the sets grow to hold the class
    assert on["conformal/missing/size@v0"] > on["conformal/missing/size@v1"] + 1
    assert on["conformal/test/ssc"] == min(on[f"conformal/test/coverage_size{s}"] for s in ("<=1", "2-3", ">=4"))
    plain = PostHoc(EvalProtocol(conformal="aps"), 4, 2).fit(model.posthoc.val_probs, model.posthoc.val_labels)
    assert plain.conformal.qhat != on["conformal/qhat"]  # the calibrated probabilities were scored, not the raw


def test_conformal_refusals_name_the_key_and_the_counts(tmp_path):
    with pytest.raises(ConfigError, match=r"^eval.conformal=aps calibrates its sets on the validation rows: set data"):
        validate(compose_train(tmp_path, ["model=mlp", "eval.conformal=aps"]))
    with pytest.raises(ConfigError) as e:
        check_eval({"conformal_alpha": 1.5})
    assert str(e.value) == "eval.conformal_alpha must be a number in (0, 1) (the sets miss at most that), got 1.5"
    with pytest.raises(ConfigError, match=r"^eval.conformal must be one of none, thr, aps, raps, got 'lac'$"):
        check_eval({"conformal": "lac"})
    stage = PostHoc(EvalProtocol(conformal="thr", conformal_alpha=0.05), 4, 2)
    with pytest.raises(ValueError) as e:
        stage.check(Rows([torch.zeros(12, 4), torch.zeros(12, 2)], torch.arange(12) % 4))
    assert str(e.value) == (
        "eval.conformal=thr at eval.conformal_alpha=0.05 needs at least 19 validation rows, there are 12: "
        "set a larger dataset.val_fraction or eval.conformal_alpha"
    )


@pytest.mark.slow
def test_a_run_writes_the_conformal_keys_and_predict_set_gives_its_sets(tmp_path):
    """train.py with eval.conformal=aps on a digits file; mnp.load(run).predict_set on the raw test rows gives the
    run's own sets; evaluate.py +eval.conformal=thr writes its keys too."""
    from test_predictor import digits_file

    import mnp
    from mnp.cli.pipeline import evaluate

    data = tmp_path / "digits.npz"
    x, y, test_idx = digits_file(data)
    overrides = ["model=mlp", "dataset=custom", f"dataset.path={data}", "dataset.val_fraction=0.2"]
    overrides += ["trainer.max_epochs=2", "eval.noise_levels=[1.0]", "eval.conformal=aps", "seed=1"]
    res = train(compose_train(tmp_path / "run", overrides))
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert on_disk["conformal/test/coverage"] == res["conformal/test/coverage"] and on_disk["conformal/method"] == "aps"
    assert {"conformal/qhat", "conformal/noise/coverage@1", "conformal/missing/coverage@v1"} <= set(on_disk)
    sets = mnp.load(tmp_path / "run").predict_set([x[test_idx, :32], x[test_idx, 32:]])
    hit = sets[np.arange(len(test_idx)), y[test_idx] - 1]  # column k: the file's label k + 1
    assert hit.mean() == pytest.approx(res["conformal/test/coverage"], abs=1e-12)
    assert sets.sum(1).mean() == pytest.approx(res["conformal/test/size"], abs=1e-12)
    narrow = mnp.load(tmp_path / "run").predict_set([x[test_idx, :32], x[test_idx, 32:]], alpha=0.4)
    assert (narrow <= sets).all() and narrow.sum() < sets.sum()
    with pytest.raises(ValueError, match=r"^alpha must be a number in \(0, 1\)"):
        mnp.load(tmp_path / "run").predict_set([x[:2, :32], x[:2, 32:]], alpha=0)
    ev = evaluate(evaluate_config(tmp_path / "run" / "checkpoints" / "last.ckpt", tmp_path / "e", {"conformal": "thr"}))
    written = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert written["conformal/method"] == "thr" and written["conformal/test/coverage"] == ev["conformal/test/coverage"]
    assert {"conformal/test/size", "conformal/missing/size_mean", "conformal/noise/size@1"} <= set(written)
