"""Table 3 rerun at small scale (§6.2): a small Multi30k model and each variation trained for M minutes.

Each row's change is taken relative to the small base, in the paper's direction and ratio: h = 1,
h / 2, 2h, 4h (the paper's 1, 4, 16, 32 against 8); d_k / 4 and d_k / 2; N about N/3, 2N/3, 4N/3;
d_model and d_ff halved and doubled (d_k follows d_model / h); the dropout, label smoothing and
positions rows as in the paper. Perplexity per word piece depends on the vocabulary, so each row is
compared with the base by direction, not by value.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..config import ModelConfig
from .variations import TABLE3, TRAIN_FIELDS, has_d_k_field

LABELS = (
    "h=1",
    "h=4",
    "h=16",
    "h=32",
    "d_k=16",
    "d_k=32",
    "N=2",
    "N=4",
    "N=8",
    "d_model=256",
    "d_model=1024",
    "d_ff=1024",
    "d_ff=4096",
    "P_drop=0.0",
    "P_drop=0.2",
    "eps_ls=0.0",
    "eps_ls=0.2",
    "learned positions",
)
BASES = {
    "lab": "the lab's model (2+2 layers, d_model 128, h 4)",
    "recipe": "the recipe's (3+3 layers, d_model 256, h 4)",
}


def small_changes(label: str, base: ModelConfig) -> dict[str, Any]:
    """The change of Table 3's row `label`, made relative to the small base."""
    h, n, d_k = base.n_heads, base.n_layers, base.encoder.d_k
    return {
        "h=1": {"n_heads": 1},
        "h=4": {"n_heads": max(1, h // 2)},
        "h=16": {"n_heads": 2 * h},
        "h=32": {"n_heads": 4 * h},
        "d_k=16": {"d_k": max(1, d_k // 4)},
        "d_k=32": {"d_k": max(1, d_k // 2)},
        "N=2": {"n_layers": max(1, round(n / 3))},
        "N=4": {"n_layers": max(1, round(2 * n / 3))},
        "N=8": {"n_layers": round(4 * n / 3) if round(4 * n / 3) > n else n + 1},
        "d_model=256": {"d_model": base.d_model // 2},
        "d_model=1024": {"d_model": 2 * base.d_model},
        "d_ff=1024": {"d_ff": base.d_ff // 2},
        "d_ff=4096": {"d_ff": 2 * base.d_ff},
        "P_drop=0.0": {"p_drop": 0.0},
        "P_drop=0.2": {"p_drop": 0.2},
        "eps_ls=0.0": {"label_smoothing": 0.0},
        "eps_ls=0.2": {"label_smoothing": 0.2},
        "learned positions": {"positions": "learned"},
    }[label]


def overrides(changes: dict[str, Any]) -> list[str]:
    """Recipe overrides for a row's changes (label smoothing is the train section's)."""
    return [f"--{'train' if k in TRAIN_FIELDS else 'model'}.{k}={v}" for k, v in changes.items()]


def direction(delta: float, tolerance: float) -> int:
    """-1, 0 or +1: the sign of a change, 0 within the tolerance."""
    return 0 if abs(delta) <= tolerance else (1 if delta > 0 else -1)


def agreement(ours: int, paper: int) -> str:
    """How a change here compares with the paper's: same, opposite, or one of them flat."""
    if ours == paper:
        return "same"
    if ours == 0:
        return "no change here"
    return "paper: no change" if paper == 0 else "opposite"


def score_run(run: Path, valid: str, src_lang: str, tgt_lang: str, bleu_sentences: int) -> dict[str, float]:
    """Dev perplexity (all pairs) and BLEU (beam 4, the first bleu_sentences) of run/model."""
    from ..data.sources import Source
    from ..evaluate import perplexity, sacre_bleu
    from ..translator import Translator

    translator = Translator.load(run / "model")
    src, ref = Source(valid, src_lang, tgt_lang).read()
    ppl, _ = perplexity(
        translator.model, translator.tokenizer.encode_source(src), translator.tokenizer.encode_target(ref)
    )
    n = bleu_sentences or len(src)
    bleu = sacre_bleu(translator.translate(src[:n], beam_size=4), ref[:n]).score
    return {"ppl": ppl, "bleu": bleu}


def base_overrides(base: str, minutes: float, threads: int) -> list[str]:
    """The base run's recipe overrides: no test set, no averaging (Table 3 has none), M minutes."""
    from .trained import FULL

    if base not in BASES:
        raise ValueError(f"unknown Table 3 base {base!r}; choose from {', '.join(BASES)}")
    common = [
        f"--train.max_minutes={minutes}",
        "--train.average_last=1",
        "--train.save_every=100000",
        "--train.eval_every=0",
        "--data.test=",
        "--model.p_drop=0.1",
    ]  # Table 3's base has the paper's P_drop (the recipe's is 0.3), so row D's 0 and 0.2 mean what they do there
    common += [f"--train.threads={threads}"] if threads else []
    return ([o for o in FULL if "max_minutes" not in o] if base == "lab" else []) + common


def row_changes(labels: list[str], base: ModelConfig, log: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """The base's and each row's changes, in order; a row that would train a model already in the
    table (N=2 and N=4 of a 2-layer base are both N=1) or that ModelConfig cannot express is left out."""
    changes: dict[str, dict[str, Any]] = {"base": {}}
    for label in labels:
        change = small_changes(label, base)
        same = next((other for other, c in changes.items() if c == change), None)
        if "d_k" in change and not has_d_k_field():
            log(f"== {label}: skipped, ModelConfig has no d_k field yet")
        elif same is not None:
            log(f"== {label}: skipped, the same model as row {same} at this base ({' '.join(overrides(change))})")
        else:
            changes[label] = change
    return changes


def row_folder(label: str) -> str:
    """A row's run folder name: h=1 -> h-1, learned positions -> learned-positions."""
    return label.replace("=", "-").replace(" ", "-")


def shared_vocabulary(out: Path, common: list[str], log: Callable[[str], None]) -> Path:
    """out/spm.model, trained once on the training text: every row reads it (Table 3 varies the model only)."""
    from ..data.sources import Source
    from ..data.vocab import Vocab
    from .trained import multi30k_recipe

    path = out / "spm.model"
    if not path.is_file():
        d = multi30k_recipe(common).data
        src, tgt = Source(d.train, d.src_lang, d.tgt_lang, "data.train").read()
        log(f"training the rows' {d.vocab_size:,}-piece vocabulary on {len(src):,} + {len(tgt):,} sentences")
        Vocab.train(src + tgt, d.vocab_size, seed_sentences=d.vocab_sample).save(path)
    return path


def run_row(
    out: Path, name: str, common: list[str], changes: dict[str, Any], key: dict[str, Any], bleu_sentences: int
) -> dict[str, float]:
    """Train one row into out/name and score it. out/name/row.json keeps the scores: a rerun with the
    same settings (key) reads them instead of training again; a run killed part way resumes."""
    import json

    from ..train.loop import train
    from ..weights import write_atomic
    from .trained import multi30k_recipe

    run, key = out / name, {**key, "changes": changes}
    done = run / "row.json"
    if done.is_file():
        kept = json.loads(done.read_text())
        if kept.get("key") != key:
            raise ValueError(
                f"{run} holds a Table 3 row run with other settings ({kept.get('key')}); "
                "give another --out or remove it"
            )
        print(f"== {name}: measured before, read from {done}", flush=True)
        return kept["measured"]
    print(f"== {name}: {' '.join(overrides(changes)) or 'the base'}, {key['minutes']} min ...", flush=True)
    recipe = multi30k_recipe(common + overrides(changes) + [f"--data.vocab={out / 'spm.model'}"])
    results = train(recipe, run, log=lambda _: None)
    if results.get("minutes", 0) < 0.99 * key["minutes"]:  # Ctrl-C: training stopped early, its checkpoint saved
        raise KeyboardInterrupt(
            f"{run} stopped at {results.get('minutes', 0):.1f} of {key['minutes']} min; the same command resumes it"
        )
    d = recipe.data
    measured = {**score_run(run, d.valid, d.src_lang, d.tgt_lang, bleu_sentences), "steps": results.get("steps", 0)}
    write_atomic(done, json.dumps({"key": key, "measured": measured}, indent=2).encode())
    print(
        f"== {name}: {measured['steps']:,} steps, dev ppl {measured['ppl']:.2f}, BLEU {measured['bleu']:.2f}",
        flush=True,
    )
    return measured


def run_table3(
    out: Path,
    minutes: float,
    labels: list[str] | None = None,
    bleu_sentences: int = 500,
    threads: int = 0,
    base: str = "lab",
    log: Callable[[str], None] = print,
    jobs: int = 1,
) -> list[dict[str, Any]]:
    """Train the small base and each chosen row for `minutes`, score them, compare directions with the paper.

    jobs rows train at once, each in its own process with `threads` threads (default: the cores / jobs);
    rows already measured in out with the same settings are read back, not trained again.
    """
    import os
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from .trained import multi30k_recipe

    unknown = sorted(set(labels or ()) - set(LABELS))
    if unknown:
        raise ValueError(f"unknown Table 3 rows: {', '.join(unknown)}; choose from {', '.join(LABELS)}")
    if jobs < 1:
        raise ValueError(f"--jobs {jobs}: at least 1 row at a time")
    threads = threads or (max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else 0)
    common = base_overrides(base, minutes, threads)
    base_config = multi30k_recipe(common).model_config(100)
    chosen = [r for r in TABLE3 if r.label in LABELS and (labels is None or r.label in labels)]
    changes = row_changes([r.label for r in chosen], base_config, log)
    out.mkdir(parents=True, exist_ok=True)
    shared_vocabulary(out, common, log)
    key = {
        "minutes": minutes,
        "base": base,
        "threads": threads,
        "bleu_sentences": bleu_sentences,
        "attention": multi30k_recipe(common).train.attention,
    }  # the kernel sets the steps a minute (cpu/train_attention.py)
    log(f"{len(changes)} rows of {minutes} min, {jobs} at a time, {threads or 'default'} thread(s) each")
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) if jobs > 1 else _InProcess() as pool:
        futures = {
            label: pool.submit(
                run_row, out, "base" if label == "base" else row_folder(label), common, c, key, bleu_sentences
            )
            for label, c in changes.items()
        }
        measured = {label: future.result() for label, future in futures.items()}
    paper_base, measured_base = TABLE3[0], measured["base"]
    rows = [
        {
            "label": "base",
            "group": "base",
            "change": BASES[base],
            **measured_base,
            "paper_ppl": paper_base.ppl,
            "paper_bleu": paper_base.bleu,
            "threads": threads,
            "jobs": jobs,
            "attention": key["attention"],
        }
    ]
    for row in (r for r in chosen if r.label in measured):
        m = measured[row.label]
        rows.append(
            {
                "label": row.label,
                "group": row.group,
                "change": " ".join(overrides(changes[row.label])),
                **m,
                "paper_ppl": row.ppl,
                "paper_bleu": row.bleu,
                "ppl_agrees": agreement(
                    direction(m["ppl"] - measured_base["ppl"], 0.01 * measured_base["ppl"]),
                    direction(row.ppl - paper_base.ppl, 0.005),
                ),
                "bleu_agrees": agreement(
                    direction(m["bleu"] - measured_base["bleu"], 0.3), direction(row.bleu - paper_base.bleu, 0.05)
                ),
            }
        )
    return rows


class _InProcess:
    """ProcessPoolExecutor's submit for jobs = 1: each row runs in this process when its result is asked for."""

    def __enter__(self) -> _InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        return SimpleNamespace(result=lambda: fn(*args))


def table_markdown(rows: list[dict[str, Any]], minutes: float) -> str:
    """The rerun beside the paper's: perplexity and BLEU, and whether each moves the same way."""
    threads, jobs = rows[0].get("threads", 0), rows[0].get("jobs", 1)
    how = f", {threads} thread(s) a row" if threads else ""
    how += f", {jobs} rows at a time" if jobs > 1 else ""
    how += f", attention kernel {rows[0]['attention']}" if rows[0].get("attention") else ""
    lines = [
        f"Table 3 at small scale: Multi30k En-De, {minutes} min of training a row{how}; dev perplexity per word "
        "piece (all 1,014 pairs) and BLEU (beam 4). The direction columns compare each row's change from "
        "the base with the paper's.",
        "",
        "| group | row | change here | steps | ppl | BLEU | paper ppl | paper BLEU | ppl direction | BLEU direction |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['group']} | {r['label']} | {r['change']} | {r['steps']:,} | {r['ppl']:.2f} | {r['bleu']:.2f} | "
            f"{r['paper_ppl']:.2f} | {r['paper_bleu']:.1f} | {r.get('ppl_agrees', '')} | {r.get('bleu_agrees', '')} |"
        )
    return "\n".join(lines) + "\n"
