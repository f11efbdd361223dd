"""The numbers of the page's live figures, all from the paper lab (aiayn.lab), which plots the same ones.

Softmax scaling (§3.2.1), the positional-encoding matrix (§3.5) of the served model's d_model and
layout, and BLEU against training FLOPs: Table 2's rows and the runs found beside the model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..config import ModelConfig
from ..lab import cost, positions, softmax
from .limits import ApiError

MATCHES = (1.0, 0.5, 0.0)  # the widget's three keys: high, medium and low match


def softmax_figure(d_k: int, raw_scale: float, scaled: bool) -> dict[str, Any]:
    """Scores raw_scale x match x sqrt(d_k), their attention weights with or without 1/sqrt(d_k), the Jacobian norm."""
    scores = softmax.scaling_scores(raw_scale, d_k, MATCHES)
    weights = softmax.attention_weights(scores, d_k, scaled)
    return {
        "d_k": d_k,
        "raw_scale": raw_scale,
        "scaled": scaled,
        "matches": list(MATCHES),
        "scores": scores.tolist(),
        "weights": weights.tolist(),
        "jacobian_norm": softmax.jacobian_norm(weights),
    }


def positions_figure(config: ModelConfig, length: int) -> dict[str, Any]:
    """PE for positions 0 .. length-1 at the model's d_model, in the model's layout: (length, d_model)."""
    table = positions.encoding(length, config.d_model, config.sinusoid_layout)
    return {
        "d_model": config.d_model,
        "layout": config.sinusoid_layout,
        "positions": config.positions,
        "length": length,
        "values": table.round(6).tolist(),
    }


def cost_figure(model_dir: Path) -> dict[str, Any]:
    """Table 2 (BLEU on newstest2014 and training FLOPs) and this model's run and its sibling runs."""
    rows = [row._asdict() for row in cost.TABLE2]
    runs, skipped = [], []
    for path in results_files(model_dir):
        try:
            if path.stat().st_size > 1 << 20:
                raise ValueError("larger than 1 MiB")
            data = json.loads(path.read_text(encoding="utf-8"))
            counted = data["matmul_flops"] if "matmul_flops" in data else data["train_flops"]  # (the older name)
            bleu, flops = float(data["test_bleu"]), float(counted)
            if not (math.isfinite(bleu) and math.isfinite(flops) and flops > 0):
                raise ValueError("test_bleu or matmul_flops is not a positive number")
            test = data.get("test")
            if test is not None and not isinstance(test, str):
                raise ValueError(f"test is {type(test).__name__}, not the test set's name")
        except KeyError as err:  # a run without a test set (recipes/tiny.yaml) has no test BLEU
            skipped.append({"run": path.parent.name, "why": f"no {err.args[0]} in its results.json"})
            continue
        except (OSError, ValueError, TypeError, RecursionError) as err:  # RecursionError: JSON nested too deep
            skipped.append({"run": path.parent.name, "why": f"{type(err).__name__}: {err}"})
            continue
        runs.append(
            {
                "run": path.parent.name,
                "bleu": bleu,
                "flops": flops,
                "test": test,
                "this_model": path.parent == model_dir.resolve().parent,
            }
        )
    return {"table2": rows, "runs": runs, "skipped": skipped}


def results_files(model_dir: Path, most: int = 50) -> list[Path]:
    """results.json of the run folder holding the model, then of the run folders beside it."""
    run = model_dir.resolve().parent
    found = [run / "results.json"] if (run / "results.json").is_file() else []
    try:
        siblings = sorted(p / "results.json" for p in run.parent.iterdir() if p.is_dir() and p != run)
    except OSError:
        siblings = []
    return found + [p for p in siblings if p.is_file()][: most - len(found)]


def query_bool(params: Any, name: str, default: bool) -> bool:
    """A yes/no query parameter: true, 1, yes or false, 0, no (any case); anything else is a 422."""
    value = params.get(name)
    if value is None:
        return default
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise ApiError(422, name, f"{name} must be true or false, not {value!r}")


def query_int(params: Any, name: str, default: int, low: int, high: int) -> int:
    value = params.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ApiError(422, name, f"{name} must be an integer, not {value!r}") from None
    if not low <= number <= high:
        raise ApiError(422, name, f"{name} = {number} is out of range: {low} to {high}")
    return number


def query_float(params: Any, name: str, default: float, low: float, high: float) -> float:
    value = params.get(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ApiError(422, name, f"{name} must be a number, not {value!r}") from None
    if not (math.isfinite(number) and low <= number <= high):
        raise ApiError(422, name, f"{name} = {number} is out of range: {low} to {high}")
    return number
