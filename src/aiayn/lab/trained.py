"""The model the lab reads: a given directory, or a small Multi30k model trained here in a minute or two."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..recipe import Recipe, load_recipe

REPO = Path(__file__).resolve().parents[3]
RECIPE = REPO / "recipes" / "multi30k-en-de.yaml"
QUICK = [  # CI: a 300,000-parameter model for 20 seconds; it learns little
    "--data.vocab_size=1000",
    "--model.preset=tiny",
    "--train.max_minutes=0.3",
    "--train.batch_tokens=2048",
    "--train.warmup_steps=100",
    "--train.lr_factor=0.5",
    "--train.threads=1",
]
FULL = [  # 2+2 layers, d_model 128, for two minutes: the recipe's d_model 256 model needs an hour on a CPU
    "--data.vocab_size=2000",
    "--model.preset=tiny",
    "--model.d_model=128",
    "--model.d_ff=512",
    "--train.max_minutes=2",
    "--train.batch_tokens=2048",
    "--train.warmup_steps=200",
    "--train.lr_factor=0.5",
]
COMMON = [
    "--data.test=",
    "--train.eval_every=0",
    "--train.save_every=30",
    "--train.keep_checkpoints=5",
    "--train.average_last=5",
    "--train.alpha=0.6",
]  # §6.1's alpha: the recipe's 1.2 was chosen for its hour-long model


def multi30k_recipe(overrides: list[str]) -> Recipe:
    """recipes/multi30k-en-de.yaml with overrides, its data paths read from the repository's root."""
    if not RECIPE.is_file():
        raise FileNotFoundError(f"{RECIPE}: the Multi30k recipe is missing (run from a checkout of aiayn)")
    recipe = load_recipe(RECIPE, overrides)
    for name in ("train", "valid"):
        path = Path(getattr(recipe.data, name))
        if not path.is_absolute():
            setattr(recipe.data, name, str(REPO / path))
    return recipe


def lab_recipe(quick: bool, minutes: float | None = None, threads: int = 0) -> Recipe:
    """The lab's short run of the Multi30k recipe (QUICK for CI, FULL otherwise)."""
    overrides = COMMON + (QUICK if quick else FULL)
    if minutes is not None:
        overrides.append(f"--train.max_minutes={minutes}")
    if threads:
        overrides.append(f"--train.threads={threads}")
    return multi30k_recipe(overrides)


def train_small(
    out: Path, quick: bool, log: Callable[[str], None] = print, minutes: float | None = None, threads: int = 0
) -> dict[str, Any]:
    """Train (or resume) the lab's model into out; return the run's results (out/model is the model)."""
    from ..train.loop import train

    recipe = lab_recipe(quick, minutes, threads)
    results = train(recipe, out, log=log)
    return {**results, "recipe": recipe}
