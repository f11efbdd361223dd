"""The cool-down (aiayn.train.schedule): eq. (3) falling linearly to zero over a run's last steps, and a
time budget's steps planned once, kept in the checkpoints, and ended on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from aiayn.recipe import TrainConfig, load_recipe
from aiayn.train.checkpoint import TrainState
from aiayn.train.loop import train
from aiayn.train.schedule import PLAN_MARGIN, cooldown_factor, plan_steps, rate, shortest_run

REPO = Path(__file__).resolve().parents[1]
VAL = REPO.parent / "shared" / "data" / "multi30k" / "val"


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_the_factor_falls_linearly_over_the_last_steps():
    # 100 steps, cool-down 0.3: steps 1-70 as eq. (3); steps 71..100 get 30/31 .. 1/31
    assert [cooldown_factor(s, 100, 0.3) for s in (1, 70)] == [1.0, 1.0]
    assert cooldown_factor(71, 100, 0.3) == pytest.approx(30 / 31)
    assert cooldown_factor(100, 100, 0.3) == pytest.approx(1 / 31)
    steps = [cooldown_factor(s, 100, 0.3) for s in range(71, 101)]
    assert all(a - b == pytest.approx(1 / 31) for a, b in zip(steps, steps[1:]))
    assert cooldown_factor(50, 0, 0.3) == 1.0 and cooldown_factor(50, 100, 0.0) == 1.0  # no length, no cool-down
    assert rate(80, 512, 40, 2.0, 100, 0.3) == pytest.approx(rate(80, 512, 40, 2.0) * 21 / 31, rel=1e-12)
    assert rate(80, 512, 40, 2.0, 100, 0.0) == rate(80, 512, 40, 2.0)


def test_plan_steps_from_the_speed_so_far():
    # 180 steps in 180 s, 3,600 s in all: 3,600 steps less the margin; never fewer than done, never above max_steps
    assert plan_steps(180, 180.0, 3600.0, 100_000) == int(3600 * (1 - PLAN_MARGIN))
    assert plan_steps(180, 180.0, 3600.0, 1000) == 1000
    assert plan_steps(180, 180.0, 100.0, 100_000) == 180


def test_shortest_run_begins_its_cool_down_after_the_step():
    for step in range(0, 200):
        for cooldown in (0.1, 0.3, 0.5, 0.9):
            n = shortest_run(step, cooldown)
            assert n - round(cooldown * n) >= step  # steps 1..step stay eq. (3)'s
            assert n == step or (n - 1) - round(cooldown * (n - 1)) < step  # and no shorter run does


def test_plans_skip_the_first_step_and_never_reach_back_into_steps_taken(monkeypatch):
    from aiayn.train import loop

    cfg = TrainConfig(max_minutes=1.0, cooldown=0.5, save_every=10, max_steps=100_000)
    state, logged, now = TrainState(step=5), [], [103.0]
    monkeypatch.setattr(loop.time, "perf_counter", lambda: now[0])
    cpu = torch.device("cpu")
    # the run began at 98 s, its first step ended at 100 s (step 1): 4 steps in 3 s are too few to plan on
    loop.plan_cooldown(cfg, state, 98.0, (100.0, 1), cpu, logged.append)
    assert state.planned_steps == 0 and not logged
    state.step = 11  # 10 steps in 3 s, 55 s left: 10 x 58 x 0.98 / 3 steps after step 1
    loop.plan_cooldown(cfg, state, 98.0, (100.0, 1), cpu, logged.append)
    assert state.planned_steps == 1 + int(10 * 58 * (1 - PLAN_MARGIN) / 3) and len(logged) == 1
    assert loop.run_steps(cfg, state) == state.planned_steps
    # at the checkpoint of step 20 the host has slowed down: the plan shrinks, but not into the steps taken
    state.step, now[0] = 20, 200.0
    loop.plan_cooldown(cfg, state, 98.0, (100.0, 1), cpu, logged.append)
    assert state.planned_steps == shortest_run(20, 0.5) == 40 and len(logged) == 1
    # cooling down now: the plan stands; and max_steps below it wins
    state.step, now[0] = 30, 500.0
    loop.plan_cooldown(cfg, state, 98.0, (100.0, 1), cpu, logged.append)
    assert state.planned_steps == 40
    assert loop.run_steps(TrainConfig(max_minutes=1.0, cooldown=0.5, max_steps=35), state) == 35
    assert loop.run_steps(TrainConfig(max_minutes=1.0, cooldown=0.5, max_steps=35), TrainState()) == 35


def tiny(out: Path, *overrides: str) -> dict:
    recipe = load_recipe(
        REPO / "recipes" / "tiny.yaml",
        [f"--data.train={VAL}", f"--data.valid={VAL}", "--train.log_every=1", "--train.save_every=10", *overrides],
    )
    return train(recipe, out, log=lambda _: None)


def logged_lr(out: Path) -> dict[int, float]:
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    return {e.step: e.value for e in events.Scalars("train/lr")}


def state(out: Path, step: int) -> dict:
    return json.loads((out / "checkpoints" / f"step-{step}" / "state.json").read_text())["train"]


def test_a_run_of_known_length_cools_down_to_its_last_step(tmp_path):
    results = tiny(tmp_path, "--train.max_steps=40", "--train.cooldown=0.25")
    lr = logged_lr(tmp_path)
    assert results["steps"] == 40
    for step in (1, 30, 31, 40):  # warm-up 20, then the last 10 steps fall to 1/11 of eq. (3)
        assert lr[step] == pytest.approx(rate(step, 64, 20, 1.0) * cooldown_factor(step, 40, 0.25), rel=1e-6)
    assert lr[40] == pytest.approx(rate(40, 64, 20, 1.0) / 11, rel=1e-6)


def test_a_time_budget_plans_its_steps_keeps_them_and_ends_on_them(tmp_path, monkeypatch):
    from aiayn.train import loop

    monkeypatch.setattr(loop, "plan_steps", lambda *a: int(0.7 * plan_steps(*a)))  # a loaded CI host stays inside
    monkeypatch.setattr(loop, "MIN_PLAN_STEPS", 3)  # and plans within its 6 s however slow its steps
    results = tiny(tmp_path, "--train.max_steps=100000", "--train.max_minutes=0.1", "--train.cooldown=0.5")
    planned = state(tmp_path, results["steps"])["planned_steps"]
    assert planned == results["steps"] > 5  # it ended on the plan, inside the budget
    assert results["minutes"] < 0.1
    assert state(tmp_path, results["steps"])["planned_minutes"] == 0.1
    lr = logged_lr(tmp_path)
    assert lr[planned] == pytest.approx(rate(planned, 64, 20, 1.0) / (round(0.5 * planned) + 1), rel=1e-6)
    # the same command again resumes at the plan's end: nothing more to train, the plan unchanged
    again = tiny(tmp_path, "--train.max_steps=100000", "--train.max_minutes=0.1", "--train.cooldown=0.5")
    assert again["steps"] == planned
    # the cool-down turned off on resume: the plan no longer ends the run, the budget does
    off = tiny(tmp_path, "--train.max_steps=100000", "--train.max_minutes=0.1", "--train.cooldown=0")
    assert off["steps"] > planned and state(tmp_path, off["steps"])["planned_steps"] == 0
    # a longer budget plans anew from the step it resumes at
    longer = tiny(tmp_path, "--train.max_steps=100000", "--train.max_minutes=0.2", "--train.cooldown=0.5")
    replanned = state(tmp_path, longer["steps"])
    assert replanned["planned_minutes"] == 0.2 and replanned["planned_steps"] > planned and longer["steps"] > planned
    # it ends on the new plan or at the budget, whichever comes first (a plan never reaches back into steps
    # taken, so one made soon after the resume can hold more steps than the budget has time for)
    assert longer["steps"] <= replanned["planned_steps"]
