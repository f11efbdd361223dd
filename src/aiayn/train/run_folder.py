"""The run folder OUT: who may use it, what aiayn may write there, and what a resume may change.

    OUT/run.json       written by aiayn at the first start: the marker of a run folder and the
                       recipe it runs (what a resume is compared with)
    OUT/.aiayn.lock    an exclusive lock held for the whole run (fcntl.flock: the system drops it
                       when the process dies, so a killed run never blocks the next)

aiayn reuses what it finds (a vocabulary, the encoded data, checkpoints) only in a folder it made;
a folder it did not make is used only when it holds none of the names aiayn writes. Nothing the
user gave is written over: the resolved recipe goes to OUT/recipe.yaml, or to
OUT/recipe.resolved.yaml when OUT/recipe.yaml is the recipe the user named.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import IO, Any

import yaml

from .. import faults
from ..data.store import FILES as STORE_FILES
from ..parse.tokenizer import SOURCE_FILE, TARGET_FILE, WORDS_FILE
from ..recipe import Recipe
from ..version import __version__
from ..weights import write_atomic

RECORD, LOCK, RECIPE, RESOLVED = "run.json", ".aiayn.lock", "recipe.yaml", "recipe.resolved.yaml"
PARSER_VOCABULARIES = (SOURCE_FILE, WORDS_FILE, TARGET_FILE)  # a parsing run's tokenizer (parse/tokenizer.py)
WRITTEN = (
    "spm.model",
    *PARSER_VOCABULARIES,
    "data",
    "checkpoints",
    "model",
    "tensorboard",
    "results.json",
    "test.hyp",
    RECIPE,
    RECORD,
)
# What a resume may not change: the data, the vocabulary and the model, and what fixes the data
# order (the saved position counts batches of batch_tokens, shuffled with seed).
ALLOWED_DATA = ("valid", "test", "workers")  # read again at each evaluation and at the end; how many encode
FIXED_TRAIN = ("batch_tokens", "seed")


class RunFolderError(ValueError):
    """OUT cannot be used for this run: the message says why and what to do."""


def lock(out: Path) -> IO[str] | None:
    """Hold OUT's lock (returns the open file: the lock lasts while it is open); refuse a busy folder."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no lock
        return None
    f = open(out / LOCK, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "?"
        f.close()
        raise RunFolderError(
            f"{out}: another `aiayn train` (pid {holder}) is using this folder; "
            f"wait for it to end, or choose another --out"
        ) from None
    except OSError as err:
        if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        return f  # a file system without locks (some network file systems): run unlocked
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    faults.point("run.after-lock")
    return f


def previous_recipe(out: Path) -> dict[str, Any] | None:
    """The recipe of the run that made OUT (run.json, or an older aiayn's recipe.yaml); None: not a run folder."""
    if (out / RECORD).is_file():
        try:
            record = json.loads((out / RECORD).read_text())
            return record["recipe"]
        except (ValueError, KeyError, TypeError):
            raise RunFolderError(f"{out / RECORD}: unreadable; it is aiayn's record of this run folder") from None
    if (out / RECIPE).is_file() and (out / "checkpoints").is_dir():  # a run folder of an older aiayn
        try:
            values = yaml.safe_load((out / RECIPE).read_text())
        except yaml.YAMLError:
            return None
        if isinstance(values, dict) and set(values) == {"data", "model", "train"}:
            return values
    return None


def check(out: Path, recipe: Recipe, recipe_file: str | Path | None, locked: bool = False) -> dict[str, Any] | None:
    """Refuse OUT when it is a file, another program's folder, or a run of a different recipe; return the old recipe.

    A run folder in which nothing was trained (no checkpoint: its start failed in the setup, on a vocabulary too
    large or a bad data file) takes a changed recipe, so that the fix its error asked for can run; under the lock
    (locked), what that start made from its recipe is removed first (`start_over`).
    """
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {out}: a file, not a folder")
    old = previous_recipe(out) if out.is_dir() else None
    if old is None and out.is_dir():
        given = Path(recipe_file).resolve() if recipe_file else None
        for name in WRITTEN:
            path = out / name
            if path.exists() and path.resolve() != given:
                raise RunFolderError(
                    f"--out {out}: not a folder aiayn train made (no {RECORD}) and it holds {name}, which training "
                    f"would use or replace; choose another --out"
                    + ("; name a vocabulary with --data.vocab=FILE" if name == "spm.model" else "")
                )
    if old is not None:
        changed = changes(old, recipe)
        if changed and not trained(out):  # an earlier start that failed before its first checkpoint: start over
            if locked:
                start_over(out, old)
            return None
        if changed:
            raise RunFolderError(
                f"--out {out}: resuming with a changed recipe: {'; '.join(changed)}. These cannot change "
                f"within a run (budgets and logging can); choose another --out for a new run"
            )
    return old


def trained(out: Path) -> bool:
    """Whether a run in OUT got past its setup: a checkpoint, or a final model, results or logs (its checkpoints may
    have been deleted to save space). Then its recipe holds."""
    checkpoints = out / "checkpoints"
    if checkpoints.is_dir() and any(p.name.startswith("step-") for p in checkpoints.iterdir()):
        return True
    return any((out / name).exists() for name in ("model", "results.json", "test.hyp", "tensorboard"))


def start_over(out: Path, old: dict[str, Any]) -> None:
    """Remove what a start that never trained made from its recipe (its vocabulary, unless the recipe named
    one, and its token stores), so that a new recipe's start makes them anew. Only aiayn's own files, in a
    folder aiayn made (run.json)."""
    if not old.get("data", {}).get("vocab"):
        (out / "spm.model").unlink(missing_ok=True)
    for name in PARSER_VOCABULARIES:  # built from the recipe's data and vocabulary size, as spm.model is
        (out / name).unlink(missing_ok=True)
    data = out / "data"
    if data.is_dir():
        for path in data.glob("*.safetensors"):  # an older aiayn's encoded data
            path.unlink()
        for split in ("train", "valid"):  # the token stores (aiayn.data.store): only the files a store has
            for name in (*STORE_FILES, "store.json"):
                (data / split / name).unlink(missing_ok=True)
            if (data / split).is_dir() and not any((data / split).iterdir()):
                (data / split).rmdir()
        if not any(data.iterdir()):
            data.rmdir()


def changes(old: dict[str, Any], recipe: Recipe) -> list[str]:
    """The fields that differ between a run's recorded recipe and this one, among those a resume may not change."""
    new = recipe.to_dict()
    found = []
    for name, value in new["data"].items():
        before = old.get("data", {}).get(name, value)
        if name not in ALLOWED_DATA and before != value:
            found.append(f"data.{name} {before!r} -> {value!r}")
    for name in FIXED_TRAIN:
        before = old.get("train", {}).get(name, new["train"][name])
        if before != new["train"][name]:
            found.append(f"train.{name} {before!r} -> {new['train'][name]!r}")
    decay_before = old.get("train", {}).get("weight_decay", 0.0)  # on or off fixes the optimizer's parameter groups
    if (decay_before > 0) != (new["train"]["weight_decay"] > 0):
        found.append(f"train.weight_decay {decay_before!r} -> {new['train']['weight_decay']!r} (on or off)")
    before_model, model = _model_fields(old.get("model", {})), _model_fields(new["model"])
    for name in sorted(before_model.keys() | model.keys()):
        if before_model.get(name) != model.get(name):
            found.append(f"model.{name} {before_model.get(name)!r} -> {model.get(name)!r}")
    return found


def _model_fields(section: dict[str, Any]) -> dict[str, Any]:
    """The ModelConfig a model section names (preset and overrides resolved), as a dict."""
    try:
        return (
            Recipe(model=dict(section)).model_config(1 << 16).to_dict()
        )  # any vocabulary size: it is compared as data
    except (TypeError, ValueError):
        return dict(section)


def record(out: Path, recipe: Recipe, recipe_file: str | Path | None) -> None:
    """Write run.json and the resolved recipe (never over the user's own recipe file)."""
    meta = {"format": "aiayn-run", "version": __version__, "recipe": recipe.to_dict()}
    write_atomic(out / RECORD, json.dumps(meta, indent=2).encode())
    target = out / RECIPE
    if recipe_file is not None and target.exists() and target.resolve() == Path(recipe_file).resolve():
        target = out / RESOLVED
    write_atomic(target, yaml.safe_dump(recipe.to_dict(), sort_keys=False).encode())
    faults.point("run.after-record")
