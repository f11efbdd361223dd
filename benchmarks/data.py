"""The paper's data at the paper's size: preparation to the first training step, its peak memory, and batch
making's share of a step, on a synthetic corpus of WMT14's size.

    .venv/bin/python benchmarks/data.py --pairs 4500000 --recipe recipes/wmt14-en-de-base.yaml
    .venv/bin/python benchmarks/data.py --pairs 36000000 --recipe recipes/wmt14-en-fr-big.yaml --tgt-lang fr --prepare-only

The corpus (WORK/corpus-N/train.{en,de}) is made once, deterministically: each pair joins two or three
Multi30k training pairs picked by a seeded generator, so that its lengths (about WMT's, 25-40 words) and its
vocabulary are those of real text. Then `aiayn train RECIPE` runs with the corpus as data.train, Multi30k's
validation set as data.valid, no test set, bf16 only where native, and max_steps 1 (the recipe's vocabulary
size and sample, its model and batches), and again on the same folder with max_steps 2 (a resumed run: the
vocabulary and the token store are reused). For each run: its wall time, the time its "parameters;" line
appeared (everything before the first step done), and its peak memory, that of the largest single process
(ru_maxrss) and the process tree's proportional set size (shared pages counted once, sampled every 0.2 s).
--prepare-only runs the recipe with a small model (`--model.preset=small`, no accumulation), so that the
figures are the data's and not the base model's step. Last, in this process: one epoch's batch making and the
padding of 32 micro-batches from the store, against 8 of the recipe's training steps.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"


def make_corpus(folder: Path, pairs: int, src_lang: str, tgt_lang: str, seed: int = 1) -> None:
    """folder/train.{src,tgt}: `pairs` lines, each two or three Multi30k pairs joined (written whole, then renamed)."""
    if (folder / f"train.{tgt_lang}").is_file():
        return
    folder.mkdir(parents=True, exist_ok=True)
    sides = {}
    for lang in (src_lang, tgt_lang):
        with gzip.open(MULTI30K / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            sides[lang] = np.array([line.rstrip("\n") for line in f], dtype=object)
    rng = np.random.default_rng(seed)
    began = time.perf_counter()
    files = {lang: open(folder / f".train.{lang}.partial", "w", encoding="utf-8") for lang in sides}
    for start in range(0, pairs, 200_000):
        n = min(200_000, pairs - start)
        picks = rng.integers(0, len(sides[src_lang]), size=(n, 3))
        three = rng.random(n) < 0.5
        for lang, lines in sides.items():
            chosen = lines[picks]
            joined = [" ".join(row if t else row[:2]) for row, t in zip(chosen, three)]
            files[lang].write("\n".join(joined) + "\n")
    for lang, f in files.items():
        f.close()
        os.replace(folder / f".train.{lang}.partial", folder / f"train.{lang}")
    size = sum((folder / f"train.{lang}").stat().st_size for lang in sides)
    print(f"corpus: {pairs:,} pairs, {size / 2**30:.2f} GiB of text, made in {time.perf_counter() - began:.0f} s")


def tree_pss(pid: int) -> int:
    """Proportional set size of pid and its descendants, in bytes: each shared page (a forked worker's view of
    its parent's memory) counted once, split between its sharers."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    parents[int(entry.name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo += [c for c, parent in parents.items() if parent == p and c not in tree]
    total = 0
    for p in tree:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration):
            pass
    return total


def run(command: list[str], log: Path) -> dict[str, float]:
    """Run command; its wall time, when its 'parameters;' line came, and its peak memory."""
    began = time.perf_counter()
    peak, marks, ended = [0], {}, threading.Event()
    with open(log, "w") as out:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # each line as it is logged: the time of "parameters;"
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        def sample() -> None:
            while not ended.is_set():
                peak[0] = max(peak[0], tree_pss(proc.pid))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode(errors="replace")
            out.write(line)
            if "parameters;" in line and "ready" not in marks:
                marks["ready"] = time.perf_counter() - began
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the largest of every child so far
        proc.returncode = os.waitstatus_to_exitcode(status)
        ended.set()
        sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed; see {log}:\n{log.read_text()[-3000:]}")
    return {"wall": time.perf_counter() - began, **marks, "tree_peak": peak[0], "largest": usage.ru_maxrss * 1024}


def batch_share(out: Path, recipe_path: str, overrides: list[str]) -> None:
    """Batch making (one epoch's batches, then padding from the store) against the recipe's own training steps."""
    import torch

    from aiayn.data.batching import BatchStream, corpus_batch
    from aiayn.data.store import TokenStore
    from aiayn.data.vocab import Vocab
    from aiayn.model import Transformer
    from aiayn.recipe import load_recipe
    from aiayn.train import precision
    from aiayn.train.step import for_this_machine

    recipe = load_recipe(recipe_path, overrides)
    store = TokenStore(out / "data" / "train")
    began = time.perf_counter()
    stream = BatchStream(store.src.lengths(), store.tgt.lengths(), recipe.train.batch_tokens, recipe.train.seed)
    epoch_s = time.perf_counter() - began
    padding, batches = [], []
    for _ in range(32):
        began = time.perf_counter()
        rows = stream.next()
        batches.append(corpus_batch(store, rows, 0, 1))
        padding.append(time.perf_counter() - began)
    torch.manual_seed(0)
    model = Transformer(recipe.model_config(len(Vocab.load(out / "spm.model")))).train()
    cpu = torch.device("cpu")
    dtype = precision.autocast_dtype(recipe.train.bf16, recipe.train.fp16, cpu)
    step = for_this_machine(model, recipe.train, cpu, dtype)
    steps = []
    for b in batches[:9]:
        began = time.perf_counter()
        with step.forward(max(b.src.size(1), b.tgt_in.size(1))):
            hidden = model(b.src, b.tgt_in, project=False)
        loss, _, _ = step.loss(hidden, model, b.tgt_out, recipe.train.label_smoothing)
        (loss / b.n_tgt).backward()
        steps.append(time.perf_counter() - began)
    step_s = float(np.median(steps[1:]))  # the first carries one-time allocations
    per_batch = epoch_s / len(stream) + float(np.median(padding))
    print(
        f"batch making: {len(stream):,} batches an epoch made in {epoch_s:.2f} s ({epoch_s / len(stream) * 1e3:.3f} ms "
        f"a batch), padding from the store {np.median(padding) * 1e3:.2f} ms a batch (median of 32); a micro-batch's "
        f"forward and backward {step_s:.2f} s (median of 8): batch making is {per_batch / (per_batch + step_s):.2%} of "
        f"a micro-batch step"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4_500_000)
    parser.add_argument("--recipe", default="recipes/wmt14-en-de-base.yaml")
    parser.add_argument("--src-lang", default="en")
    parser.add_argument("--tgt-lang", default="de")
    parser.add_argument("--work", type=Path, default=Path("/tmp/aiayn-data-bench"))
    parser.add_argument("--prepare-only", action="store_true", help="a tiny model's one step: the data's figures")
    parser.add_argument("--keep", action="store_true", help="keep the run folder (the corpus is always kept)")
    args = parser.parse_args()
    corpus = args.work / f"corpus-{args.pairs}-{args.src_lang}-{args.tgt_lang}"
    make_corpus(corpus, args.pairs, args.src_lang, args.tgt_lang)
    out = args.work / f"run-{args.pairs}-{Path(args.recipe).stem}"
    shutil.rmtree(out, ignore_errors=True)
    overrides = [
        f"--data.train={corpus / 'train'}",
        f"--data.valid={MULTI30K / 'val'}",
        "--data.test=",
        f"--data.src_lang={args.src_lang}",
        f"--data.tgt_lang={args.tgt_lang}",
        "--train.eval_every=0",
        "--train.eval_bleu=false",
        "--train.average_last=1",
        "--train.bf16=auto",  # the recipes' bf16 is a GPU's; a CPU without bf16 products would emulate it
    ]
    if args.prepare_only:
        overrides += ["--model.preset=small", "--train.effective_batch_tokens=0"]
    aiayn = [sys.executable, "-m", "aiayn", "train", args.recipe, "--out", str(out), *overrides]
    load = os.getloadavg()[0]
    first = run([*aiayn, "--train.max_steps=1"], args.work / "first.log")
    store = sum(f.stat().st_size for f in (out / "data" / "train").iterdir())
    again = run([*aiayn, "--train.max_steps=2"], args.work / "again.log")
    text = (args.work / "first.log").read_text()
    kept = re.search(r"kept [\d,]+ pairs.*", text)
    print(f"{args.pairs:,} pairs, {args.recipe}{' (a small model: the data alone)' if args.prepare_only else ''}")
    print(f"  {kept[0] if kept else 'no filter report'}")
    for name, r in (("first run", first), ("second run, same folder", again)):
        print(
            f"  {name}: ready for its first step at {r.get('ready', float('nan')):.0f} s, done (one step, a "
            f"checkpoint) at {r['wall']:.0f} s; peak RSS {r['largest'] / 2**30:.2f} GiB (largest process), "
            f"{r['tree_peak'] / 2**30:.2f} GiB (the process tree's proportional set size)"
        )
    print(
        f"  token store: {store / 2**30:.2f} GiB on disk; the corpus {sum(f.stat().st_size for f in corpus.iterdir()) / 2**30:.2f} GiB"
    )
    if not args.prepare_only:
        batch_share(out, args.recipe, overrides)
    print(f"  load average at the start {load:.1f}, at the end {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
