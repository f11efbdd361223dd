"""benchmarks/multi30k.py's budgets on a folder that already holds some of them (issue 17's curve).

`--minutes 15 30 60 120` on a folder trained to 30 minutes once re-scored the 30-minute model as the
15-minute row and copied it over model-15min. A budget the run has passed is now skipped: its model
copy is left as it was and its row comes from the report's earlier run.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from aiayn.recipe import load_recipe
from aiayn.train import loop

REPO = Path(__file__).resolve().parents[1]
VAL = REPO.parent / "shared" / "data" / "multi30k" / "val"
SETTINGS = [f"data.train={VAL}", f"data.valid={VAL}", "train.max_steps=4"]


def benchmark():
    spec = importlib.util.spec_from_file_location("bench_multi30k", REPO / "benchmarks" / "multi30k.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(minutes: float, steps: int, bleu: float) -> dict:
    return dict(
        budget_minutes=minutes,
        minutes=minutes,
        steps=steps,
        epoch=2,
        valid_bleu=bleu,
        test_bleu=bleu,
        tokens_per_s=1.0,
        peak_rss_mib=1.0,
        decoder="-",
        mean_load=0.0,
    )


def test_a_budget_the_run_has_passed_is_skipped_with_its_model_and_row_kept(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    trained = loop.train(
        load_recipe(REPO / "recipes" / "tiny.yaml", [f"--{s}" for s in SETTINGS]), out, log=lambda _: None
    )
    past = trained["minutes"] / 2  # a budget this run has already trained through
    (out / f"model-{past:g}min").mkdir()
    (out / f"model-{past:g}min" / "mine").write_text("the model of that budget")
    bench = benchmark()
    bench.write_report(out / "report.md", [row(past, 2, 12.5)], [])

    later = past * 4  # a longer budget: "trained" here by a stand-in that records what it was asked
    asked = []

    def fake_train(recipe, folder):
        asked.append(recipe.train.max_minutes)
        return dict(minutes=later, steps=9, epoch=2, tokens_per_s=1.0, test_bleu=20.0)

    monkeypatch.setattr(loop, "train", fake_train)
    monkeypatch.setattr(bench, "validation_bleu", lambda model, recipe: 21.0)
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "multi30k.py",
            "--recipe",
            str(REPO / "recipes" / "tiny.yaml"),
            "--out",
            str(out),
            "--minutes",
            str(past),
            str(later),
            "--set",
            *SETTINGS,
        ],
    )
    threads = torch.get_num_threads()
    try:
        bench.main()
    finally:
        torch.set_num_threads(threads)
    assert asked == [later]  # the passed budget was not trained (nor scored) again
    assert f"the {past:g}-minute budget is past, skipped" in capsys.readouterr().out
    assert (out / f"model-{past:g}min" / "mine").read_text() == "the model of that budget"
    assert (out / f"model-{later:g}min" / "model.safetensors").is_file()
    text = (out / "report.md").read_text()
    rows = json.loads(text[text.index("```json") + 7 : text.rindex("```")])
    assert [(r["budget_minutes"], r["steps"], r["test_bleu"]) for r in rows] == [(past, 2, 12.5), (later, 9, 20.0)]
    assert (
        bench.trained_minutes(out) == pytest.approx(trained["minutes"], abs=0.01)
        and bench.trained_minutes(tmp_path / "new") == 0.0
    )
