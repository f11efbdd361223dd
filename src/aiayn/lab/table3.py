"""Table 3 rerun at small scale (§6.2): the paper's base scaled down and each variation trained for the same steps.

Every row sees the same tokens (the same steps of the same batch size) and differs from the base only in what
the paper varies. Each change is made relative to the base in the paper's direction and ratio: h = 1, 4, 16,
32 against 8 (d_k = d_v = d_model / h, computation constant); d_k / 4 and d_k / 2; N / 3, 2N / 3, 4N / 3;
d_model and d_ff halved and doubled; the dropout, label smoothing and positions rows as in the paper. The base
trains with several seeds, and a row closer to it than that spread gets the same seeds, so a difference is read
against the noise. Two more rows train on short sentences only, with sinusoids and with learned positions, and
are scored on longer ones (§3.5's extrapolation).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
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
SHORT = {"short, sinusoids": {}, "short, learned": {"positions": "learned"}}  # §3.5: trained short, scored long
BASES = {
    "small": "the paper's base scaled down (3+3 layers, d_model 128, d_ff 512, h 8)",
    "recipe": "the recipe's model (3+3 layers, d_model 256, d_ff 1024, h 4)",
}
SMALL = [  # the base's shape divided by 4 in width, by 2 in depth (N = 3 keeps N / 3, 2N / 3, 4N / 3 distinct)
    "--data.vocab_size=2000",
    "--model.preset=tiny",
    "--model.n_layers=3",
    "--model.d_model=128",
    "--model.d_ff=512",
    "--model.n_heads=8",
    "--train.batch_tokens=2048",
    "--train.warmup_steps=200",
    "--train.lr_factor=0.25",  # peak 1.6e-3, the recipe's: at 3.1e-3 a 4-layer post-LN stack stalled (loss 4.5)
]
BLEU_FLOOR, PPL_FLOOR = 0.3, 0.01  # the least tolerance: BLEU points, and a share of the base's perplexity


def small_changes(label: str, base: ModelConfig) -> dict[str, Any]:
    """The change of Table 3's row `label`, made relative to the small base."""
    h, n, d_k = base.n_heads, base.n_layers, base.encoder.d_k
    return {
        "h=1": {"n_heads": max(1, h // 8)},
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
        **SHORT,
    }[label]


def overrides(changes: dict[str, Any]) -> list[str]:
    """Recipe overrides for a row's changes (label smoothing is the train section's)."""
    return [f"--{'train' if k in TRAIN_FIELDS else 'model'}.{k}={v}" for k, v in changes.items()]


def score_run(
    run: Path, valid: str, src_lang: str, tgt_lang: str, bleu_sentences: int, longer_than: int = 0
) -> dict[str, float]:
    """Dev perplexity (all pairs) and BLEU (beam 4, the first bleu_sentences) of run/model.

    longer_than L > 0 scores the pairs whose longer side has more than L pieces (ppl_long, bleu_long, n_long)
    apart from the others (ppl_short): the rows trained on pairs of at most L pieces.
    """
    from ..data.sources import Source
    from ..evaluate import perplexity, sacre_bleu
    from ..translator import Translator

    translator = Translator.load(run / "model")
    src, ref = Source(valid, src_lang, tgt_lang).read()
    src_ids, tgt_ids = translator.tokenizer.encode_source(src), translator.tokenizer.encode_target(ref)
    n = bleu_sentences or len(src)
    if not longer_than:
        ppl, _ = perplexity(translator.model, src_ids, tgt_ids)
        return {"ppl": ppl, "bleu": sacre_bleu(translator.translate(src[:n], beam_size=4), ref[:n]).score}
    long = [i for i in range(len(src)) if max(len(src_ids[i]), len(tgt_ids[i])) > longer_than]
    longer = set(long)
    short = [i for i in range(len(src)) if i not in longer]
    if not long or not short:
        raise ValueError(f"{valid}: no pairs on one side of {longer_than} pieces; choose another --short")
    ppl_long, _ = perplexity(translator.model, [src_ids[i] for i in long], [tgt_ids[i] for i in long])
    ppl_short, _ = perplexity(translator.model, [src_ids[i] for i in short], [tgt_ids[i] for i in short])
    picked = long[:n]
    hyps = translator.translate([src[i] for i in picked], beam_size=4)
    return {
        "ppl": ppl_short,
        "ppl_long": ppl_long,
        "bleu_long": sacre_bleu(hyps, [ref[i] for i in picked]).score,
        "n_long": len(long),
        "n_short": len(short),
    }


def base_overrides(base: str, steps: int, threads: int) -> list[str]:
    """The rows' common overrides: the base's shape, `steps` steps, the paper's P_drop 0.1, eps_ls 0.1 and Adam
    without weight decay, no averaging (Table 3 has none), no test set, §6.1's alpha."""
    if base not in BASES:
        raise ValueError(f"unknown Table 3 base {base!r}; choose from {', '.join(BASES)}")
    common = [
        f"--train.max_steps={steps}",
        "--train.max_minutes=0",
        "--train.average_last=1",
        "--train.keep_checkpoints=1",
        "--train.save_every=250",
        "--train.eval_every=0",
        "--data.test=",
        "--model.p_drop=0.1",
        "--train.label_smoothing=0.1",
        "--train.weight_decay=0",
        "--train.alpha=0.6",
    ]
    common += [f"--train.threads={threads}"] if threads else []
    return (SMALL if base == "small" else []) + common


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


def row_folder(label: str, seed: int = 1) -> str:
    """A row's run folder name: h=1 -> h-1, learned positions -> learned-positions, seed 2 -> h-1-seed2."""
    name = label.replace("=", "-").replace(", ", "-").replace(" ", "-")
    return name if seed == 1 else f"{name}-seed{seed}"


def training_subset(out: Path, pairs: int, common: list[str], log: Callable[[str], None]) -> list[str]:
    """The override that trains on the first `pairs` training pairs, written once to out/train-first-N.{src,tgt}.gz
    (none for 0: all of them). Fewer pairs for the same steps: the rows make as many passes over their data as
    the paper's base did over WMT (100,000 steps of 25,000 tokens, about 18 passes), so dropout has work to do."""
    import gzip

    from ..data.sources import Source
    from ..weights import write_atomic
    from .trained import multi30k_recipe

    if not pairs:
        return []
    d = multi30k_recipe(common).data
    prefix = out / f"train-first-{pairs}"
    files = {lang: Path(f"{prefix}.{lang}.gz") for lang in (d.src_lang, d.tgt_lang)}
    if not all(f.is_file() for f in files.values()):
        src, tgt = Source(d.train, d.src_lang, d.tgt_lang, "data.train").read()
        if pairs > len(src):
            raise ValueError(f"--pairs {pairs:,}: {d.train} has {len(src):,} pairs")
        log(f"the rows train on the first {pairs:,} of {len(src):,} pairs: {prefix}.*.gz")
        for lang, lines in ((d.src_lang, src), (d.tgt_lang, tgt)):
            write_atomic(files[lang], gzip.compress("".join(s + "\n" for s in lines[:pairs]).encode(), mtime=0))
    return [f"--data.train={prefix}"]


def shared_vocabulary(out: Path, common: list[str], log: Callable[[str], None]) -> Path:
    """out/spm.model, trained once on the rows' training text: every row reads it (Table 3 varies the model only).
    out/spm.json records what it was trained on; a folder whose vocabulary was trained on other text is refused."""
    from ..data.sources import Source
    from ..data.vocab import Vocab
    from ..weights import write_atomic
    from .trained import multi30k_recipe

    d = multi30k_recipe(common).data
    path, record = out / "spm.model", out / "spm.json"
    settings = {"train": Path(d.train).name, "vocab_size": d.vocab_size}
    if path.is_file():
        kept = json.loads(record.read_text()) if record.is_file() else None
        if kept != settings:
            raise ValueError(
                f"{path} was trained for other settings ({kept or 'not recorded'}, here {settings}); give another --out"
            )
        return path
    src, tgt = Source(d.train, d.src_lang, d.tgt_lang, "data.train").read()
    log(f"training the rows' {d.vocab_size:,}-piece vocabulary on {len(src):,} + {len(tgt):,} sentences")
    write_atomic(record, json.dumps(settings).encode())  # first: a vocabulary is never left without its record
    Vocab.train(src + tgt, d.vocab_size, seed_sentences=d.vocab_sample).save(path)
    return path


def row_key(key: dict[str, Any], changes: dict[str, Any], seed: int, short: int) -> dict[str, Any]:
    """What a row's scores were measured under: the table's settings, the row's changes, its seed and cut."""
    return {**key, "changes": changes, "seed": seed, "short": short}


def kept_row(run: Path, key: dict[str, Any]) -> dict[str, float] | None:
    """The scores run/row.json keeps for these settings (None: not measured yet); other settings are refused."""
    done = run / "row.json"
    if not done.is_file():
        return None
    kept = json.loads(done.read_text())
    if kept.get("key") != key:
        raise ValueError(
            f"{run} holds a Table 3 row run with other settings ({kept.get('key')}); give another --out or remove it"
        )
    return kept["measured"]


def run_row(
    out: Path,
    name: str,
    common: list[str],
    changes: dict[str, Any],
    key: dict[str, Any],
    bleu_sentences: int,
    seed: int = 1,
    short: int = 0,
    train_missing: bool = True,
) -> dict[str, float] | None:
    """Train one row into out/name with `seed` and score it. out/name/row.json keeps the scores: a rerun with
    the same settings (key) reads them instead of training again; a run stopped part way resumes. short > 0
    trains on the pairs of at most `short` pieces and scores the longer ones apart."""
    from ..train.loop import train
    from ..weights import write_atomic
    from .trained import multi30k_recipe

    run, key = out / name, row_key(key, changes, seed, short)
    kept = kept_row(run, key)
    if kept is not None:
        print(f"== {name}: measured before, read from {run / 'row.json'}", flush=True)
        return kept
    if not train_missing:
        return None
    extra = [f"--train.seed={seed}", f"--data.vocab={out / 'spm.model'}"]
    extra += [f"--data.max_subwords={short}"] if short else []
    print(f"== {name}: {' '.join(overrides(changes) + extra[:1] + extra[2:])}, {key['steps']:,} steps ...", flush=True)
    recipe = multi30k_recipe(common + overrides(changes) + extra)
    results = train(recipe, run, log=lambda _: None)
    if results.get("steps", 0) < key["steps"]:  # Ctrl-C: training stopped early, its checkpoint saved
        raise KeyboardInterrupt(
            f"{run} stopped at step {results.get('steps', 0):,} of {key['steps']:,}; the same command resumes it"
        )
    d = recipe.data
    measured = {
        **score_run(run, d.valid, d.src_lang, d.tgt_lang, bleu_sentences, short),
        "steps": results.get("steps", 0),
        "minutes": round(results.get("minutes", 0.0), 2),
    }
    write_atomic(run / "row.json", json.dumps({"key": key, "measured": measured}, indent=2).encode())
    print(
        f"== {name}: {measured['steps']:,} steps, {measured['minutes']} min, "
        + ", ".join(f"{k} {v:.2f}" for k, v in measured.items() if k.startswith(("ppl", "bleu"))),
        flush=True,
    )
    return measured


def run_table3(
    out: Path,
    steps: int,
    labels: list[str] | None = None,
    bleu_sentences: int = 500,
    threads: int = 0,
    base: str = "small",
    log: Callable[[str], None] = print,
    jobs: int = 1,
    pairs: int = 0,
    seeds: int = 2,
    short: int = 0,
    reseed: bool = True,
) -> list[dict[str, Any]]:
    """Train the small base (with `seeds` seeds) and each chosen row for `steps` steps, score them, and compare
    each group with the paper's statement; a row closer to the base than the base's seed spread is trained
    with the same seeds. short > 0 adds the two rows of §3.5 trained on pairs of at most `short` pieces.

    jobs rows train at once, each in its own process with `threads` threads (default: the cores / jobs);
    rows already measured in out with the same settings are read back, not trained again; reseed False trains
    no further seeds of the rows near the base and reads those measured before.
    """
    import os

    from .trained import multi30k_recipe

    unknown = sorted(set(labels or ()) - set(LABELS) - set(SHORT))
    if unknown:
        raise ValueError(f"unknown Table 3 rows: {', '.join(unknown)}; choose from {', '.join([*LABELS, *SHORT])}")
    if set(labels or ()) & set(SHORT) and not short:
        raise ValueError(f"the rows {' and '.join(SHORT)} need --short L: the longest pair they train on")
    if jobs < 1 or seeds < 1:
        raise ValueError(f"--jobs {jobs}, --seeds {seeds}: at least 1 of each")
    threads = threads or (max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else 0)
    every = base_overrides(base, steps, threads)
    base_config = multi30k_recipe(every).model_config(100)
    chosen = [r for r in TABLE3 if r.label in LABELS and (labels is None or r.label in labels)]
    changes = row_changes([r.label for r in chosen], base_config, log)
    out.mkdir(parents=True, exist_ok=True)
    common = every + training_subset(out, pairs, every, log)
    shared_vocabulary(out, common, log)
    key = {
        "steps": steps,
        "base": base,
        "pairs": pairs,
        "threads": threads,
        "bleu_sentences": bleu_sentences,
        "attention": multi30k_recipe(common).train.attention,
        "overrides": every,
    }  # the kernel changes the arithmetic, not the steps, but keep rows of one kernel together; the base's
    # overrides: a row trained at another learning rate or shape of the base is never read as this one
    rows = [label for label in changes if label != "base"]
    rows.sort(key=lambda label: -cost(base_config, changes[label]))  # the longest first: the jobs end together
    shorts = [s for s in SHORT if short and (labels is None or s in labels)]
    tasks = [("base", 1)] + [(label, 1) for label in rows] + [("base", s) for s in range(2, seeds + 1)]
    tasks += [(s, 1) for s in shorts]
    log(f"{len(tasks)} runs of {steps:,} steps, {jobs} at a time, {threads or 'default'} thread(s) each")

    def train_all(todo: list[tuple[str, int]]) -> dict[tuple[str, int], dict[str, float]]:
        rows = {  # each row's folder, change and cut (§3.5's rows: `short` pieces; the others none)
            (label, seed): (
                row_folder(label, seed),
                *((SHORT[label], short) if label in SHORT else (changes[label], 0)),
            )
            for label, seed in todo
        }
        for (_, seed), (name, change, cut) in rows.items():  # a row of other settings: refused now, not after
            kept_row(out / name, row_key(key, change, seed, cut))  # the rows beside it have trained
        calls = {  # §3.5's rows train on all pairs up to `short` pieces, not `--pairs`
            (label, seed): (out, name, every if label in SHORT else common, change, key, bleu_sentences, seed, cut)
            for (label, seed), (name, change, cut) in rows.items()
        }
        return run_queued(run_row, calls, jobs)

    measured = train_all(tasks)
    tol = tolerance([measured["base", s] for s in range(1, seeds + 1)])
    again = [
        (label, seed)
        for label in changes
        if label != "base"
        and close(measured[label, 1], mean_of([measured["base", s] for s in range(1, seeds + 1)]), tol)
        for seed in range(2, seeds + 1)
    ]
    if again and reseed:
        log(
            f"{len(again)} more runs: rows within the base's seed spread ({tol['bleu']:.2f} BLEU, {tol['ppl']:.2f} ppl)"
        )
        measured |= train_all(again)
    elif again:  # --no-reseed: the further seeds measured before, none trained
        for label, seed in again:
            name, c = row_folder(label, seed), changes[label]
            kept = run_row(out, name, common, c, key, bleu_sentences, seed, 0, train_missing=False)
            if kept is not None:
                measured[label, seed] = kept
    return table_rows(measured, changes, shorts, seeds, base, key, jobs, tol)


def cost(base: ModelConfig, changes: dict[str, Any]) -> float:
    """A row's training FLOPs for one pair of 20 pieces a side (aiayn.train.flops): its place in the queue."""
    from ..train.flops import train_flops

    return train_flops(base.replace(**{k: v for k, v in changes.items() if k not in TRAIN_FIELDS}), 1, 20, 20)


def mean_of(runs: list[dict[str, float]]) -> dict[str, float]:
    """The seeds' mean of each score, with each score's spread (max - min) as `{name}_spread`."""
    names = [k for k in runs[0] if k.startswith(("ppl", "bleu"))]
    mean = {k: statistics.fmean(r[k] for r in runs) for k in names}
    mean |= {f"{k}_spread": max(r[k] for r in runs) - min(r[k] for r in runs) for k in names}
    kept = {k: runs[0][k] for k in ("steps", "n_long", "n_short") if k in runs[0]}
    return mean | kept | {"seeds": len(runs)}


def tolerance(base_runs: list[dict[str, float]]) -> dict[str, float]:
    """The noise a difference is read against: the base's seed spread, at least BLEU_FLOOR and PPL_FLOOR of its ppl."""
    m = mean_of(base_runs)
    return {"bleu": max(m["bleu_spread"], BLEU_FLOOR), "ppl": max(m["ppl_spread"], PPL_FLOOR * m["ppl"])}


def close(row: dict[str, float], base: dict[str, float], tol: dict[str, float]) -> bool:
    """Whether a row's BLEU or perplexity is within the tolerance of the base's."""
    return abs(row["bleu"] - base["bleu"]) <= tol["bleu"] or abs(row["ppl"] - base["ppl"]) <= tol["ppl"]


def table_rows(
    measured: dict[tuple[str, int], dict[str, float]],
    changes: dict[str, dict[str, Any]],
    shorts: list[str],
    seeds: int,
    base: str,
    key: dict[str, Any],
    jobs: int,
    tol: dict[str, float],
) -> list[dict[str, Any]]:
    """One row per label: the mean over its seeds, the paper's figures, and each group's verdict."""
    paper = {r.label: r for r in TABLE3}
    rows = []
    for label in [*changes, *shorts]:
        runs = [measured[label, s] for s in range(1, seeds + 1) if (label, s) in measured]
        row = {"label": label, **mean_of(runs)}
        row["runs"] = runs
        row["minutes"] = sum(r.get("minutes", 0.0) for r in runs)
        if label in SHORT:
            row |= {
                "group": "§3.5",
                "change": " ".join(overrides(SHORT[label])) or "sinusoids",
            }
        else:
            p = paper[label]
            row |= {
                "group": p.group,
                "change": BASES[base] if label == "base" else " ".join(overrides(changes[label])),
                "paper_ppl": p.ppl,
                "paper_bleu": p.bleu,
            }
        rows.append(row)
    rows[0] |= {
        "threads": key["threads"],
        "jobs": jobs,
        "attention": key["attention"],
        "pairs": key["pairs"],
        "tolerance": tol,
    }
    verdicts = group_verdicts({r["label"]: r for r in rows}, tol)
    rows[0]["verdicts"] = verdicts
    return rows


PAPER_SAYS = {
    "A": "single-head attention is 0.9 BLEU worse than the best setting, quality also drops off with too many heads",
    "B": "reducing the attention key size d_k hurts model quality",
    "C": "bigger models are better",
    "D": "dropout is very helpful in avoiding over-fitting; label smoothing hurts perplexity but improves BLEU (§5.4)",
    "E": "learned positional embeddings instead of sinusoids: nearly identical results to the base model",
    "§3.5": "sinusoids may let the model extrapolate to sequence lengths longer than those met in training",
}


def group_verdicts(rows: dict[str, dict[str, Any]], tol: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Each group's statement (§6.2, PAPER_SAYS) judged on the rows present: holds True / False, and why.

    Every difference a verdict reads must be larger than the tolerance (the base's seed spread, at least
    BLEU_FLOOR and PPL_FLOOR), so a verdict is no stronger than the seeds allow.
    """
    b = rows["base"]
    ppl_worse = lambda r: r["ppl"] - b["ppl"] > tol["ppl"]  # noqa: E731
    bleu_worse = lambda r: b["bleu"] - r["bleu"] > tol["bleu"]  # noqa: E731
    better = lambda r: b["ppl"] - r["ppl"] > tol["ppl"] or r["bleu"] - b["bleu"] > tol["bleu"]  # noqa: E731
    worse = lambda r: (ppl_worse(r) or bleu_worse(r)) and not better(r)  # noqa: E731  one metric, and not the other
    out: dict[str, dict[str, Any]] = {}

    def judge(group: str, need: list[str], holds: Callable[[], bool], why: Callable[[], str]) -> None:
        if all(n in rows for n in need):
            out[group] = {"paper": PAPER_SAYS[group], "holds": bool(holds()), "why": why()}

    def bleu(label: str) -> str:
        return f"{label} {rows[label]['bleu']:.2f}"

    def ppl(label: str) -> str:
        return f"{label} {rows[label]['ppl']:.2f}"

    heads = ["h=4", "base", "h=16"]
    judge(
        "A",
        ["h=1", "h=32", *heads],
        lambda: (
            (best := max(rows[h]["bleu"] for h in heads)) - rows["h=1"]["bleu"] > tol["bleu"]
            and best - rows["h=32"]["bleu"] > tol["bleu"]
        ),
        lambda: (
            "BLEU "
            + ", ".join(bleu(h) for h in ["h=1", *heads, "h=32"])
            + "; the direction is judged (the paper's gap for one head: 0.9)"
        ),
    )
    judge(
        "B",
        ["d_k=16", "d_k=32"],
        lambda: worse(rows["d_k=16"]) and not better(rows["d_k=32"]) and not better(rows["d_k=16"]),
        lambda: (
            "ppl "
            + ", ".join(ppl(x) for x in ["base", "d_k=32", "d_k=16"])
            + "; BLEU "
            + ", ".join(bleu(x) for x in ["base", "d_k=32", "d_k=16"])
        ),
    )
    series = [
        ["N=2", "N=4", "base", "N=8"],
        ["d_model=256", "base", "d_model=1024"],
        ["d_ff=1024", "base", "d_ff=4096"],
    ]
    present = [[x for x in s if x in rows] for s in series]
    judge(
        "C",
        ["N=2", "d_model=256", "d_model=1024", "d_ff=1024", "d_ff=4096"],
        lambda: all(
            all(rows[big]["ppl"] - rows[small]["ppl"] <= tol["ppl"] for small, big in zip(s, s[1:]))
            and rows[s[0]]["ppl"] - rows[s[-1]]["ppl"] > tol["ppl"]
            for s in present
        ),
        lambda: (
            "ppl, smaller to bigger: " + "; ".join(" -> ".join(f"{rows[x]['ppl']:.2f}" for x in s) for s in present)
        ),
    )
    judge(
        "D",
        ["P_drop=0.0", "eps_ls=0.0"],
        lambda: (
            worse(rows["P_drop=0.0"])
            and b["ppl"] - rows["eps_ls=0.0"]["ppl"] > tol["ppl"]
            and b["bleu"] - rows["eps_ls=0.0"]["bleu"] > tol["bleu"]
        ),
        lambda: (
            f"ppl and BLEU: the base {b['ppl']:.2f}, {b['bleu']:.2f}; P_drop 0 {rows['P_drop=0.0']['ppl']:.2f}, "
            f"{rows['P_drop=0.0']['bleu']:.2f}; eps_ls 0 {rows['eps_ls=0.0']['ppl']:.2f}, {rows['eps_ls=0.0']['bleu']:.2f}"
        ),
    )
    judge(
        "E",
        ["learned positions"],
        lambda: (
            abs(rows["learned positions"]["ppl"] - b["ppl"]) <= tol["ppl"]
            and abs(rows["learned positions"]["bleu"] - b["bleu"]) <= tol["bleu"]
        ),
        lambda: (
            f"learned {rows['learned positions']['ppl']:.2f} ppl, {rows['learned positions']['bleu']:.2f} BLEU; "
            f"sinusoids {b['ppl']:.2f}, {b['bleu']:.2f}; within the tolerance counts as equal"
        ),
    )
    sine, learned = SHORT
    judge(
        "§3.5",
        [sine, learned],
        lambda: (
            rows[learned]["ppl_long"] - rows[sine]["ppl_long"] > tol["ppl"]
            and rows[sine]["bleu_long"] - rows[learned]["bleu_long"] > tol["bleu"]
        ),
        lambda: (
            "on longer pairs: sinusoids {:.2f} ppl, {:.2f} BLEU; learned {:.2f}, {:.2f} (seen lengths: {:.2f} "
            "against {:.2f} ppl)".format(
                *(rows[s][k] for s in SHORT for k in ("ppl_long", "bleu_long")), *(rows[s]["ppl"] for s in SHORT)
            )
        ),
    )
    return out


def run_queued(fn: Callable[..., Any], calls: dict[Any, tuple[Any, ...]], jobs: int) -> dict[Any, Any]:
    """fn(*args) for each of calls, `jobs` at a time in a process pool (in this process for jobs = 1), the results
    in the calls' order. A call is handed to the pool only when a process is free, so a stop (Ctrl-C: every row
    running saves its checkpoint and raises) starts no further row: the pool's own queue would run them all."""
    from concurrent.futures import FIRST_COMPLETED, wait

    results, todo, running = {}, list(calls.items()), {}
    with _pool(jobs) as pool:
        while todo or running:
            while todo and len(running) < jobs:
                name, args = todo.pop(0)
                running[pool.submit(fn, *args)] = name
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                results[running.pop(future)] = future.result()
    return {name: results[name] for name in calls}


def _pool(jobs: int) -> Any:
    """A process pool of `jobs` (spawned: each row its own torch), or this process for jobs = 1."""
    import os
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    if jobs == 1:
        return _InProcess()
    return ProcessPoolExecutor(
        jobs, mp_context=get_context("spawn"), initializer=_end_with_parent, initargs=(os.getpid(),)
    )


def _end_with_parent(parent: int) -> None:
    """A row's worker ends when the table's process does, however that was killed (Ctrl-C reaches every process
    of the group, a kill only the one named): Linux sends it SIGTERM then (PR_SET_PDEATHSIG), and the same command
    resumes its row from the last checkpoint. Elsewhere a worker left behind stays until stopped.

    The worker ignores SIGINT between rows: Ctrl-C would end an idle one, and the pool would then end the others
    before they saved their checkpoints. Training sets its own handler (a checkpoint, then stop) while it runs."""
    import ctypes
    import os
    import signal
    import sys

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(1, ctypes.c_ulong(signal.SIGTERM)) != 0:  # 1: PR_SET_PDEATHSIG
        print(f"the row's process will outlive the table's if it is killed: {os.strerror(ctypes.get_errno())}")
    if os.getppid() != parent:  # the parent ended before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


class _InProcess:
    """ProcessPoolExecutor's submit for jobs = 1: the call runs in this process as it is submitted."""

    def __enter__(self) -> _InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as err:  # Ctrl-C too: result() raises it, as a pool's future does
            future.set_exception(err)
        return future


def table_markdown(rows: list[dict[str, Any]], steps: int) -> str:
    """The rerun beside the paper's: perplexity and BLEU with their seed spread, and each group's verdict."""
    first = rows[0]
    how = f", {first['threads']} thread(s) a row" if first.get("threads") else ""
    how += f", {first['jobs']} rows at a time" if first.get("jobs", 1) > 1 else ""
    how += f", attention kernel {first['attention']}" if first.get("attention") else ""
    data = f"the first {first['pairs']:,} training pairs" if first.get("pairs") else "all training pairs"
    tol = first["tolerance"]
    lines = [
        f"Table 3 at small scale: Multi30k En-De, {data}, {steps:,} steps of every row{how}. Dev perplexity per "
        "word piece (all 1,014 pairs) and BLEU (beam 4), the mean over the seeds ± half their spread (max - min). "
        f"Tolerance (the base's seed spread, at least {BLEU_FLOOR} BLEU and {PPL_FLOOR:.0%}): "
        f"{tol['bleu']:.2f} BLEU, {tol['ppl']:.2f} ppl.",
        "",
        "| group | row | change here | seeds | ppl | BLEU | paper ppl | paper BLEU | minutes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["group"] == "§3.5":
            continue
        spread = lambda k: f" ± {r[k + '_spread'] / 2:.2f}" if r["seeds"] > 1 else ""  # noqa: E731
        lines.append(
            f"| {r['group']} | {r['label']} | {r['change']} | {r['seeds']} | {r['ppl']:.2f}{spread('ppl')} | "
            f"{r['bleu']:.2f}{spread('bleu')} | {r['paper_ppl']:.2f} | {r['paper_bleu']:.1f} | {r['minutes']:.1f} |"
        )
    short = [r for r in rows if r["group"] == "§3.5"]
    if short:
        lines += [
            "",
            f"§3.5 at small scale: all training pairs of at most the cut's pieces; dev pairs longer than that "
            f"({short[0]['n_long']}) scored apart from the others ({short[0]['n_short']}).",
            "",
            "| row | ppl, seen lengths | ppl, longer | BLEU, longer | minutes |",
            "|---|---|---|---|---|",
            *(
                f"| {r['label']} | {r['ppl']:.2f} | {r['ppl_long']:.2f} | {r['bleu_long']:.2f} | {r['minutes']:.1f} |"
                for r in short
            ),
        ]
    verdicts = first.get("verdicts", {})
    if verdicts:
        lines += ["", "| group | the paper says | holds here | measured |", "|---|---|---|---|"]
        lines += [f"| {g} | {v['paper']} | {'yes' if v['holds'] else 'no'} | {v['why']} |" for g, v in verdicts.items()]
        held = sum(v["holds"] for g, v in verdicts.items() if g in "ABCDE")
        lines += ["", f"{held} of {sum(g in 'ABCDE' for g in verdicts)} groups A-E hold in the paper's direction."]
    return "\n".join(lines) + "\n"
