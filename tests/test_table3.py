"""Table 3 at small scale (`aiayn paper table3`) and the claims that read its rows (lab/table3.py, lab/rows.py)."""

from __future__ import annotations

import gzip
import json
import math
import os
import time
from pathlib import Path

import pytest
import torch

from aiayn.cli import main as cli_main
from aiayn.config import ModelConfig
from aiayn.evaluate import perplexity
from aiayn.lab import claims, figures, heads, rows, table3
from aiayn.lab.variations import TABLE3
from aiayn.model import Transformer

PAPER_ROWS = {r.label: {"ppl": r.ppl, "bleu": r.bleu} for r in TABLE3}
TOLERANCE = {"bleu": table3.BLEU_FLOOR, "ppl": table3.PPL_FLOOR * PAPER_ROWS["base"]["ppl"]}


def test_the_papers_own_table_holds_in_every_group():
    """The criteria are the paper's statements: its own Table 3 passes all of them, and a row moved the other
    way fails its group."""
    verdicts = table3.group_verdicts(PAPER_ROWS, TOLERANCE)
    assert {g: v["holds"] for g, v in verdicts.items()} == {g: True for g in "ABCDE"}
    assert "h=1 24.90" in verdicts["A"]["why"] and "6.11 -> 5.19 -> 4.92 -> 4.88" in verdicts["C"]["why"]
    flipped = {
        "A": {"h=1": {"ppl": 4.9, "bleu": 25.7}},  # one head as good as the best
        "B": {"d_k=16": {"ppl": 4.90, "bleu": 25.8}},  # smaller keys cost nothing
        "C": {"d_model=1024": {"ppl": 5.9, "bleu": 24.0}},  # bigger is worse
        "D": {"eps_ls=0.0": {"ppl": 4.67, "bleu": 25.7}},  # label smoothing's BLEU gain within the noise
        "E": {"learned positions": {"ppl": 5.5, "bleu": 24.5}},
    }
    for group, change in flipped.items():
        assert not table3.group_verdicts(PAPER_ROWS | change, TOLERANCE)[group]["holds"], group
    near = {"learned positions": {"ppl": 4.92 + 1.5 * TOLERANCE["ppl"], "bleu": 25.8}}  # 1.5 tolerances: a difference
    assert not table3.group_verdicts(PAPER_ROWS | near, TOLERANCE)["E"]["holds"]
    short = {"ppl": 5.0, "n_long": 400, "n_short": 600}
    extrapolating = {
        "short, sinusoids": {**short, "ppl_long": 9.0, "bleu_long": 20.0},
        "short, learned": {**short, "ppl_long": 30.0, "bleu_long": 12.0},
    }
    assert table3.group_verdicts(PAPER_ROWS | extrapolating, TOLERANCE)["§3.5"]["holds"]
    extrapolating["short, learned"] |= {"ppl_long": 9.02, "bleu_long": 19.9}  # within the tolerance: not shown
    assert not table3.group_verdicts(PAPER_ROWS | extrapolating, TOLERANCE)["§3.5"]["holds"]


def test_small_changes_keep_the_papers_directions():
    base = ModelConfig.preset("tiny", n_layers=3, d_model=128, d_ff=512, n_heads=8)  # the scaled-down base
    assert [table3.small_changes(f"h={h}", base) for h in (1, 4, 16, 32)] == [{"n_heads": h} for h in (1, 4, 16, 32)]
    assert [table3.small_changes(f"d_k={d}", base) for d in (16, 32)] == [{"d_k": 4}, {"d_k": 8}]  # 64/4, 64/2
    assert [table3.small_changes(f"N={n}", base)["n_layers"] for n in (2, 4, 8)] == [1, 2, 4]  # distinct at N = 3
    assert table3.small_changes("d_model=1024", base) == {"d_model": 256}
    recipe = ModelConfig.preset("small")  # h = 4: the ratios of 1, 4, 16, 32 to 8
    assert [table3.small_changes(f"h={h}", recipe)["n_heads"] for h in (1, 4, 16, 32)] == [1, 2, 8, 16]
    assert table3.overrides({"label_smoothing": 0.0, "p_drop": 0.2}) == [
        "--train.label_smoothing=0.0",
        "--model.p_drop=0.2",
    ]
    two = ModelConfig.preset("tiny", d_model=128, d_ff=512)  # a 2+2-layer base: N=2 and N=4 are both N=1
    logged = []
    kept = table3.row_changes(["N=2", "N=4", "N=8", "P_drop=0.0"], two, logged.append)
    assert kept == {"base": {}, "N=2": {"n_layers": 1}, "N=8": {"n_layers": 3}, "P_drop=0.0": {"p_drop": 0.0}}
    assert logged == ["== N=4: skipped, the same model as row N=2 at this base (--model.n_layers=1)"]
    costs = {label: table3.cost(base, table3.small_changes(label, base)) for label in ("d_model=1024", "N=2", "h=32")}
    assert costs["d_model=1024"] > table3.cost(base, {}) > costs["N=2"]
    assert costs["h=32"] == table3.cost(base, {})  # row A keeps the computation constant (§6.2)


def test_rows_within_the_base_spread_get_its_seeds(tmp_path, monkeypatch, data_dir):
    """The base trains with every seed; a row near it (within the seeds' spread) too; one far from it once."""
    scores = {"base": (10.0, 20.0), "base-seed2": (10.4, 20.8), "h-1": (13.0, 15.0), "eps_ls-0.0": (9.0, 20.5)}
    asked = []

    def fake_run_row(out, name, common, changes, key, bleu_sentences, seed=1, short=0):
        asked.append(name)
        ppl, bleu = scores.get(name, scores.get(name.removesuffix("-seed2"), (0, 0)))
        return {"ppl": ppl, "bleu": bleu, "steps": key["steps"], "minutes": 1.0}

    monkeypatch.setattr(table3, "run_row", fake_run_row)
    monkeypatch.setattr(table3, "shared_vocabulary", lambda *a: None)
    out = table3.run_table3(tmp_path, 5, ["h=1", "eps_ls=0.0"], seeds=2, log=lambda _: None)
    assert asked == ["base", "h-1", "eps_ls-0.0", "base-seed2", "eps_ls-0.0-seed2"]
    by = {r["label"]: r for r in out}
    assert by["base"]["seeds"] == 2 and by["base"]["ppl"] == pytest.approx(10.2)
    assert by["base"]["bleu_spread"] == pytest.approx(0.8) and by["base"]["tolerance"] == pytest.approx(
        {"bleu": 0.8, "ppl": 0.4}
    )
    assert by["h=1"]["seeds"] == 1 and by["eps_ls=0.0"]["seeds"] == 2
    text = table3.table_markdown(out, 5)
    assert "| base | base |" in text and "20.40 ± 0.40" in text
    calls = []

    def reading_only(out, name, common, changes, key, bleu_sentences, seed=1, short=0, train_missing=True):
        calls.append((name, train_missing))
        return fake_run_row(out, name, common, changes, key, bleu_sentences, seed, short) if train_missing else None

    monkeypatch.setattr(table3, "run_row", reading_only)
    kept = table3.run_table3(tmp_path, 5, ["h=1", "eps_ls=0.0"], seeds=2, log=lambda _: None, reseed=False)
    assert calls[-1] == ("eps_ls-0.0-seed2", False)  # --no-reseed: read if measured before, never trained
    assert {r["label"]: r["seeds"] for r in kept} == {"base": 2, "h=1": 1, "eps_ls=0.0": 1}


def test_table3_trains_scores_and_reads_rows_back(tmp_path, monkeypatch, data_dir, capsys):
    """Real rows, two at a time, on the first 300 pairs; the short rows scored apart; a rerun reads them back,
    other settings are refused, a stopped row resumes; the learner's claims read the folder."""
    folder = tmp_path / "table3"
    command = ["paper", "table3", "--out", str(tmp_path), "--steps", "2", "--pairs", "300", "--seeds", "1"]
    command += ["--short", "20", "--jobs", "2", "--bleu-sentences", "2"]
    command += ["--rows", "h=1", "eps_ls=0.0", "short, sinusoids", "short, learned"]
    assert cli_main(command) == 0
    subset = gzip.decompress((folder / "train-first-300.en.gz").read_bytes()).decode().splitlines()
    first = gzip.decompress((data_dir / "multi30k" / "train.en.gz").read_bytes()).decode().splitlines()[:300]
    assert subset == first
    written = json.loads((folder / "table3.json").read_text())
    assert [r["label"] for r in written] == ["base", "h=1", "eps_ls=0.0", "short, sinusoids", "short, learned"]
    assert all(r["steps"] == 2 and r["ppl"] > 1 for r in written)
    sine = written[3]
    assert sine["n_long"] + sine["n_short"] == 1014 and sine["ppl_long"] > 1 and sine["group"] == "§3.5"
    kept = json.loads((folder / "h-1" / "row.json").read_text())
    assert kept["key"]["changes"] == {"n_heads": 1} and kept["key"]["pairs"] == 300
    assert "| A | h=1 | --model.n_heads=1 | 1 |" in (folder / "table3.md").read_text()

    monkeypatch.setattr("aiayn.train.loop.train", lambda *a, **k: pytest.fail("a measured row was trained again"))
    again = table3.run_table3(folder, 2, ["h=1"], 2, threads=written[0]["threads"], pairs=300, seeds=1, log=print)
    assert again[1]["ppl"] == written[1]["ppl"]
    with monkeypatch.context() as m:  # refused before any row trains (not after the rows beside it)
        m.setattr(table3, "run_queued", lambda *a: pytest.fail("rows were trained before the refusal"))
        with pytest.raises(ValueError, match="holds a Table 3 row run with other settings"):
            table3.run_table3(folder, 3, ["h=1"], 2, threads=written[0]["threads"], pairs=300, seeds=1)
    with monkeypatch.context() as m:  # the base's own settings changed in the code: its rows are not these
        m.setattr(table3, "SMALL", [o for o in table3.SMALL if "lr_factor" not in o] + ["--train.lr_factor=0.5"])
        with pytest.raises(ValueError, match="holds a Table 3 row run with other settings"):
            table3.run_table3(folder, 2, ["h=1"], 2, threads=written[0]["threads"], pairs=300, seeds=1)
    monkeypatch.setattr("aiayn.train.loop.train", lambda *a, **k: {"minutes": 0.001, "steps": 1})  # Ctrl-C
    with pytest.raises(KeyboardInterrupt, match="the same command resumes it"):
        table3.run_table3(folder, 2, ["eps_ls=0.2"], 2, threads=written[0]["threads"], pairs=300, seeds=1)
    assert not (folder / "eps_ls-0.2" / "row.json").exists()
    with pytest.raises(ValueError, match="trained for other settings"):  # the vocabulary of the first 300 pairs
        table3.run_table3(folder, 2, ["h=1"], 2, threads=written[0]["threads"], pairs=400, seeds=1)
    with pytest.raises(ValueError, match="need --short L"):
        table3.run_table3(folder, 2, ["short, learned"], 2, pairs=300, seeds=1)

    from aiayn.data.sources import Source

    valid = Source(data_dir / "multi30k" / "val", "en", "de").read()
    measured = rows.measure(folder, (valid[0][:30], valid[1][:30]), pairs=5)
    assert measured["entropy"]["h=1"]["encoder"].shape == (3, 1)
    assert measured["entropy"]["base"]["cross"].shape == (3, 8) and measured["cut"] == 20
    assert sum(b["pairs"] for b in measured["by_length"]["learned"]) == 30
    verdicts = {c.id: c for c in claims._rows(measured)}
    assert set(verdicts) == {"13.5", "13.6", "13.7"} and all(c.holds is not None for c in verdicts.values())
    for draw in (figures.label_smoothing, figures.one_head, figures.extrapolation):
        assert (tmp_path / draw({"rows": measured}, tmp_path)).read_bytes()[:4] == b"\x89PNG"


def test_claims_on_the_rows_judge_against_the_seed_spread():
    base = {"ppl": 10.0, "bleu": 20.0, "ppl_spread": 0.2, "bleu_spread": 0.4, "seeds": 2}
    measured = {
        "rows": {
            "base": base,
            "eps_ls=0.0": {"ppl": 9.0, "bleu": 19.0, "seeds": 1},
            "h=1": {"ppl": 11.0, "bleu": 18.0, "seeds": 1},
            "short, sinusoids": {"ppl": 8.0, "ppl_long": 20.0, "bleu_long": 10.0, "n_long": 400},
            "short, learned": {"ppl": 8.1, "ppl_long": 200.0, "bleu_long": 2.0, "n_long": 400},
        },
        "tolerance": {"ppl": 0.2, "bleu": 0.4},
        "entropy": {
            "h=1": {"encoder": torch.ones(2, 1).numpy() * 1.5, "cross": torch.ones(2, 1).numpy() * 1.2},
            "base": {"encoder": torch.ones(2, 4).numpy(), "cross": torch.ones(2, 4).numpy()},
        },
        "by_length": {},
        "cut": 20,
    }
    got = {c.id: c.holds for c in claims._rows(measured)}
    assert got == {"13.5": True, "13.6": True, "13.7": True}
    measured["rows"]["eps_ls=0.0"] = {"ppl": 9.0, "bleu": 19.8, "seeds": 1}  # BLEU within the spread: not shown
    assert {c.id: c.holds for c in claims._rows(measured)}["13.5"] is False
    assert [c.holds for c in claims._rows(None)] == [None, None, None]


def test_entropy_and_perplexity_by_length_agree_with_references():
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40, max_len=64)).eval()
    sources = [[5, 9, 11, 7, 2], [6, 8, 2], list(range(4, 30)) + [2]]
    targets = [[12, 13, 2], [14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 2], [9, 2]]
    got = rows.attention_entropy(model, sources, targets)
    for name in ("encoder", "cross"):
        total, queries = 0, 0
        for src, tgt in zip(sources, targets):
            p = torch.from_numpy(heads.attention_maps(model, torch.tensor([src]), torch.tensor([[1] + tgt[:-1]]))[name])
            total = total + torch.distributions.Categorical(probs=p).entropy().sum(-1)
            queries += p.shape[2]
        assert got[name] == pytest.approx((total / queries).numpy(), abs=1e-5)
    buckets = rows.perplexity_by_length(model, sources, targets, edges=(5, 16))
    assert [b["pairs"] for b in buckets] == [1, 1, 1]
    pooled = math.exp(sum(b["nll"] for b in buckets) / sum(b["tokens"] for b in buckets))
    assert pooled == pytest.approx(perplexity(model, sources, targets)[0], rel=1e-5)


def test_row_workers_end_when_the_table_process_is_killed(tmp_path):
    """A kill of the table's process alone (not Ctrl-C to its group) leaves no worker training on."""
    import signal
    import subprocess
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    script = tmp_path / "table.py"
    script.write_text(
        "import time\n"
        "from aiayn.lab.table3 import _pool\n"
        "if __name__ == '__main__':\n"
        "    with _pool(2) as pool:\n"
        "        futures = [pool.submit(time.sleep, 600) for _ in range(2)]\n"
        "        print(*pool._processes, flush=True)\n"
        "        time.sleep(600)\n"
    )
    table = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    workers = [int(pid) for pid in table.stdout.readline().split()]
    assert len(workers) == 2
    table.send_signal(signal.SIGKILL)
    table.wait()
    left = workers
    for _ in range(600):  # each worker gets SIGTERM at once; poll until both are gone (at most a minute)
        left = [pid for pid in left if Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)]
        if not left:
            break
        time.sleep(0.1)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"workers {left} outlived the table's process"


def _state(pid: int) -> str:
    """/proc/PID/stat's state letter ("Z": ended, not yet reaped), or "Z" when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def _row_or_stop(folder: str, name: str, beside: bool) -> str:
    """A stand-in row for run_queued: "stop" is a row stopped by Ctrl-C, any other leaves its mark; beside: the
    first row still runs when "stop" raises (it waits for stop's mark, then a while)."""
    if name == "stop":
        (Path(folder) / "stopping").write_text(name)
        raise KeyboardInterrupt(f"{name} stopped")
    while beside and name == "first" and not (Path(folder) / "stopping").exists():
        time.sleep(0.05)
    time.sleep(2 if beside and name == "first" else 0)
    (Path(folder) / name).write_text(name)
    return name


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_stopped_row_starts_no_further_row(tmp_path, jobs):
    """Ctrl-C stops the table: the rows not yet started never start (a pool's own queue would run them all),
    and a row running beside the stopped one ends as it does."""
    calls = {name: (str(tmp_path), name, jobs > 1) for name in ["first", "stop", "third", "fourth", "fifth"]}
    with pytest.raises(KeyboardInterrupt, match="stop stopped"):
        table3.run_queued(_row_or_stop, calls, jobs)
    assert {p.name for p in tmp_path.iterdir()} == {"first", "stopping"}
    done = table3.run_queued(_row_or_stop, {n: c for n, c in calls.items() if n != "stop"}, jobs)
    assert list(done) == ["first", "third", "fourth", "fifth"] and list(done.values()) == list(done)
