"""The whole-run ETA during MNP's warm-up, on a fake clock: a main epoch costs about 11 warm-up epochs."""

from types import SimpleNamespace

import pytest

from mnp.cli import progress
from mnp.cli.progress import MAIN_OVER_WARMUP, RunClock


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Module:
    """What RunClock reads of MNP: its warm-up length and whether the current epoch is in it."""

    def __init__(self, warmup: int):
        self.spec, self.epoch = SimpleNamespace(warmup=SimpleNamespace(epochs=warmup)), 0

    def in_warmup(self) -> bool:
        return self.epoch < self.spec.warmup.epochs


def run_epochs(clock: RunClock, fake: FakeClock, module: Module, seconds: list[float]) -> None:
    for s in seconds:
        clock.epoch_started()
        fake.now += s
        clock.epoch_ended(clock.stage(module))
        module.epoch += 1


def test_the_eta_during_the_warm_up_prices_the_main_epochs_at_a_main_epochs_cost(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(progress.time, "perf_counter", fake)
    trainer, module, clock = SimpleNamespace(max_epochs=10), Module(warmup=4), RunClock()
    assert clock.eta(trainer, module, 0) is None  # nothing timed yet
    warm_s, main_s = 0.1, 1.1  # the true costs: a main epoch is 11 warm-up epochs
    run_epochs(clock, fake, module, [warm_s, warm_s])
    truth = 2 * warm_s + 6 * main_s  # 2 warm-up and 6 main epochs left
    assert clock.eta(trainer, module, 2) == pytest.approx(truth)
    assert truth / (8 * warm_s) > 8  # the warm-up's mean alone (the old ETA) was over 8× too short here
    run_epochs(clock, fake, module, [warm_s, warm_s, 2.0])  # the first main epoch: its own time takes over
    assert clock.eta(trainer, module, 5) == pytest.approx(5 * 2.0)
    run_epochs(clock, fake, module, [1.0])
    assert clock.eta(trainer, module, 6) == pytest.approx(4 * 1.5) and clock.eta(trainer, module, 10) == 0


def test_a_run_timed_in_the_main_stage_only_prices_warm_up_epochs_by_the_same_ratio(monkeypatch):
    """Resumed after its warm-up: no warm-up epoch is left to price, but the rule is symmetric."""
    fake = FakeClock()
    monkeypatch.setattr(progress.time, "perf_counter", fake)
    trainer, module, clock = SimpleNamespace(max_epochs=10), Module(warmup=4), RunClock()
    module.epoch = 1  # a fake clock: the stage is the module's, the epoch count what eta is told
    module.spec.warmup.epochs = 0
    run_epochs(clock, fake, module, [2.2])
    module.spec.warmup.epochs = 4
    assert clock.eta(trainer, module, 2) == pytest.approx(2 * 2.2 / MAIN_OVER_WARMUP + 6 * 2.2)
    assert clock.eta(SimpleNamespace(max_epochs=-1), module, 2) is None
