"""What a run logs and where it stops: the all-reduced loss of several ranks, real tokens per step,
max_epochs at the end of the epoch, and a progress bar toward the limit that ends the run."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from aiayn.data.batching import BatchStream
from aiayn.data.sources import read_lines
from aiayn.data.vocab import Vocab
from aiayn.evaluate import sacre_bleu, tokenized_bleu
from aiayn.recipe import TrainConfig, load_recipe
from aiayn.train import loop
from aiayn.train.progress import ProgressBar, nearest_limit, stop
from test_distributed import DATA, load_state, seed_out_dir, torchrun, write_recipe

STEPS = 4


@pytest.fixture(autouse=True, scope="module")
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def train_lengths(recipe: Path, out: Path) -> tuple[list[int], list[int]]:
    """Subword lengths of the run's encoded training pairs (its token store, checked and opened)."""
    r = load_recipe(recipe)
    vocab = Vocab.load(out / "spm.model")
    corpus = loop.load_split(r, r.data.train, vocab, len(vocab), out / "data" / "train", lambda _: None)
    return corpus.src.lengths().tolist(), corpus.tgt.lengths().tolist()


def logged(out: Path, name: str) -> list[float]:
    """The TensorBoard scalars train/NAME of a run, in step order."""
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    return [e.value for e in sorted(events.Scalars(f"train/{name}"), key=lambda e: e.step)]


def test_two_ranks_log_the_loss_of_all_ranks(tmp_path):
    """Rank 0 logs the sum of both ranks' losses over both ranks' target tokens: what one process
    logs for the same step's batches (2 micro-batches of 512 real tokens, either way)."""
    if not (DATA / "multi30k").is_dir():
        pytest.fail(f"the shared data folder is missing: {DATA}")
    recipe = write_recipe(tmp_path / "tiny.yaml", DATA)
    overrides = [f"--train.max_steps={STEPS}", "--train.log_every=1"]
    one = tmp_path / "one"
    loop.train(load_recipe(recipe, overrides), one, log=lambda _: None)
    two = seed_out_dir(one, tmp_path / "two")
    proc = torchrun(recipe, two, *overrides)
    text, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, text
    assert "1 micro-batch(es) of 512 tokens per step x 2 process(es)" in text, text
    assert len(logged(two, "loss")) == STEPS
    assert logged(two, "loss") == pytest.approx(logged(one, "loss"), rel=1e-5)  # not about 1/2 of it
    # The real tokens of each step: the stream's two batches, counted here from the token store.
    src, tgt = train_lengths(recipe, one)
    stream = BatchStream(src, tgt, 512, seed=1)
    steps = [[stream.next() for _ in range(2)] for _ in range(STEPS)]
    real = {
        name: [sum(lens[i] for batch in step for i in batch) for step in steps]
        for name, lens in (("src_tokens", src), ("tgt_tokens", tgt))
    }
    for name, expected in real.items():
        assert logged(two, name) == logged(one, name) == expected, name
    assert all(0.9 * 1024 <= max(s, t) <= 1024 for s, t in zip(real["src_tokens"], real["tgt_tokens"])), real


def test_max_epochs_stops_at_the_end_of_the_epoch_and_results_have_both_bleus(tmp_path):
    recipe = write_recipe(tmp_path / "tiny.yaml", DATA)
    test = {lang: read_lines(f"{DATA / 'multi30k' / 'test_2016_flickr'}.{lang}.gz")[:20] for lang in ("en", "de")}
    for lang, lines in test.items():
        (tmp_path / f"test.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    overrides = [
        "--train.max_epochs=1",
        "--train.effective_batch_tokens=0",
        "--train.max_steps=100000",
        "--train.save_every=0",
        f"--data.test={tmp_path / 'test'}",
    ]  # one batch a step; one checkpoint
    out = tmp_path / "run"
    results = loop.train(load_recipe(recipe, overrides), out, log=lambda _: None)
    per_epoch = len(BatchStream(*train_lengths(recipe, out), 512, seed=1))
    assert results["steps"] == per_epoch and results["epochs_done"] == 1
    assert results["matmul_flops"] > 0 and results["device_seconds"] == pytest.approx(results["minutes"] * 60)
    assert load_state(out / "checkpoints" / f"step-{per_epoch}").data == {"epoch": 1, "index": per_epoch}
    # results.json: sacreBLEU and the paper's tokenised BLEU of the same translations, German rules
    hyp = (out / "test.hyp").read_text(encoding="utf-8").splitlines()
    assert json.loads((out / "results.json").read_text()) == results
    assert results["test_bleu"] == pytest.approx(sacre_bleu(hyp, test["de"]).score)
    tokenized = tokenized_bleu(hyp, test["de"], "de")
    assert (results["test_tokenized_bleu"], results["tokenized_signature"]) == (tokenized.score, tokenized.signature)


@pytest.mark.parametrize(
    "limits, step, seconds, epochs, expected",
    [
        (dict(max_minutes=60), 10, 600.0, 0.5, (600.0, 3600, "s")),  # a time-limited run counts its seconds
        (dict(max_minutes=60, max_steps=50), 40, 600.0, 0.5, (40, 50, "steps")),  # ... unless max_steps is nearer
        (dict(max_minutes=60, max_epochs=2), 10, 600.0, 1.5, (1.5, 2, "epochs")),  # ... or max_epochs
        (dict(), 10, 600.0, 0.5, (10, 100_000, "steps")),
        (dict(max_minutes=60, max_epochs=2), 0, 0.0, 0.0, (0.0, 3600, "s")),  # at the start, time first
    ],
)
def test_the_nearest_limit(limits, step, seconds, epochs, expected):
    assert tuple(nearest_limit(TrainConfig(**limits), step, seconds, epochs)) == expected


def test_stop_at_each_limit():
    t = TrainConfig(max_steps=50, max_minutes=1, max_epochs=2)
    assert not stop(t, 49, 59.9, 1.99)
    assert stop(t, 50, 0, 0) and stop(t, 0, 60, 0) and stop(t, 0, 0, 2.0)
    assert not stop(TrainConfig(max_steps=50), 49, 1e9, 1e9)  # max_minutes and max_epochs 0: no limit


def test_the_bar_of_a_time_limited_run_counts_seconds_then_the_nearer_limit():
    file = io.StringIO()
    t = TrainConfig(max_minutes=60, max_steps=1000)
    bar = ProgressBar(t, 0, 0.0, 0.0, file=file)
    bar.bar.mininterval = 0  # print every update
    bar.update(1, 30.7, 0.01, loss="5.000")
    assert "30/3600 s" in file.getvalue() and "step=1, loss=5.000" in file.getvalue()
    assert "100000" not in file.getvalue() and "steps" not in file.getvalue()
    bar.update(900, 60.0, 0.5, loss="2.000")  # 90% of max_steps, 2% of the time: the steps bind first
    assert file.getvalue().rstrip().endswith("]") and "900/1000 steps" in file.getvalue()
    with bar:  # closes on leaving, errors too
        pass
    assert bar.bar.disable  # tqdm's mark of a closed bar


def test_the_bar_of_a_run_past_its_time_limit_ends_full():
    """The last step ends after the limit (slow steps: 246 s of a 240-second run): 100%, never tqdm's "?" total."""
    file = io.StringIO()
    bar = ProgressBar(TrainConfig(max_minutes=4), 0, 0.0, 0.0, file=file)
    bar.bar.mininterval = 0
    bar.update(25, 246.4, 0.4, loss="3.700")
    bar.close()
    last = file.getvalue().replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("100%") and "240/240 s" in last and "?" not in last
