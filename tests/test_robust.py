"""Issue 12, "data loss and code execution": each fault injected, and the promise checked.

Nothing the user owns is deleted or written over, nothing loaded runs code, a busy run folder is
locked, a changed recipe is refused by name, a full disk leaves the earlier checkpoints; every
refusal is one or two lines on stderr, never a traceback.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn import weights
from aiayn.cli import main
from aiayn.config import ModelConfig
from aiayn.data.sources import read_lines
from aiayn.data.vocab import Vocab
from aiayn.model import Transformer
from aiayn.train import checkpoint, run_folder
from aiayn.train.checkpoint import TrainState, load_checkpoint, save_checkpoint
from aiayn.train.rng import rng_state

REPO = Path(__file__).resolve().parents[1]
VAL = REPO.parent / "shared" / "data" / "multi30k" / "val"


def train_args(out: Path, *extra: str) -> list[str]:
    return [
        "train",
        str(REPO / "recipes" / "tiny.yaml"),
        "--out",
        str(out),
        f"--data.train={VAL}",
        f"--data.valid={VAL}",
        "--train.max_steps=4",
        "--train.save_every=2",
        *extra,
    ]


PROGRESS = re.compile(r"\d+%\|")  # tqdm's bar, shown before the failure


def refused(capsys, argv: list[str], *words: str) -> str:
    """Run `aiayn ARGV`, which must fail with one or two lines naming words, and no traceback."""
    code = main(argv)
    err = "\n".join(line for line in capsys.readouterr().err.splitlines() if not PROGRESS.search(line)).strip()
    assert code != 0, err
    assert "Traceback" not in err and 1 <= len(err.splitlines()) <= 2, err
    for word in words:
        assert word in err, (word, err)
    return err


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(autouse=True, scope="module")
def _restore_threads():
    threads = torch.get_num_threads()  # the tiny recipe sets 1 thread
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A finished tiny run folder: checkpoints at steps 2 and 4, OUT/model."""
    out = tmp_path_factory.mktemp("robust") / "run"
    assert main(train_args(out)) == 0
    return out


def copy_run(run: Path, to: Path) -> Path:
    shutil.copytree(run, to, ignore=shutil.ignore_patterns(run_folder.LOCK))
    return to


# 1. convert --force replaces only what the converter writes; an output around the input is refused


def test_convert_refuses_an_output_that_is_holds_or_lies_in_the_input(run, tmp_path, capsys):
    model = shutil.copytree(run / "model", tmp_path / "models" / "en-de")
    (tmp_path / "models" / "notes.txt").write_text("mine")
    before = snapshot(tmp_path)
    for out in (model.parent, model, model / "ct2", tmp_path):
        for to in ("ctranslate2", "marian"):
            refused(capsys, ["convert", str(model), str(out), "--to", to, "--force"], str(out), "input model")
    assert snapshot(tmp_path) == before


def test_convert_force_keeps_unrelated_files(run, tmp_path):
    pytest.importorskip("ctranslate2")
    for to, written in (("marian", "model.safetensors"), ("ctranslate2", "model.bin")):
        out = tmp_path / to
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        (out / "sub").mkdir()
        (out / "sub" / "data.txt").write_text("also mine")
        for _ in range(2):  # into a folder of the user's, then over the model written there
            assert main(["convert", str(run / "model"), str(out), "--to", to, "--force"]) == 0
            assert (out / "notes.txt").read_text() == "mine" and (out / "sub" / "data.txt").read_text() == "also mine"
            assert (out / written).is_file()
        assert main(["convert", str(run / "model"), str(out), "--to", to]) == 2  # a model there: --force needed
    assert not list(tmp_path.glob(".aiayn-ct2-*"))  # the converter's scratch folder is gone


# 2. nothing is unpickled with code: the training state is JSON + safetensors


class Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


def test_a_pickle_payload_in_a_checkpoint_never_runs(run, tmp_path, capsys):
    out = copy_run(run, tmp_path / "run")
    step = out / "checkpoints" / "step-4"
    marker = tmp_path / "pwned"
    for name in (checkpoint.STATE, checkpoint.TENSORS):
        (step / name).unlink()
    torch.save({"step": 4, "optimizer": Payload(marker)}, step / checkpoint.OLD_STATE)  # an old-format state.pt
    refused(capsys, train_args(out, "--train.max_steps=6"), str(step / "state.pt"), "refused")
    assert not marker.exists()


def test_an_old_plain_state_pt_is_still_read(run, tmp_path):
    """An older aiayn's state.pt (tensors and plain containers only) resumes through weights_only=True."""
    step = copy_run(run, tmp_path / "run") / "checkpoints" / "step-4"
    state, optimizer = load_checkpoint(step)
    rng = state.rng[0]
    kind, keys, pos, has_gauss, cached = rng["numpy"]
    old = {
        "step": state.step,
        "optimizer": optimizer,
        "data": state.data,
        "elapsed": state.elapsed,
        "flops": state.flops,
        "tokens": state.tokens,
        "scaler": {},
        "rng": {
            "torch": rng["torch"],
            "python": rng["python"],
            "numpy": [kind, torch.from_numpy(keys.astype("int64")), pos, has_gauss, cached],
        },
    }
    torch.save(old, step / checkpoint.OLD_STATE)
    for name in (checkpoint.STATE, checkpoint.TENSORS):
        (step / name).unlink()
    again, optimizer_again = load_checkpoint(step)
    assert (again.step, again.data, again.tokens) == (state.step, state.data, state.tokens)
    assert torch.equal(again.rng[0]["torch"], rng["torch"]) and again.rng[0]["python"] == rng["python"]
    assert torch.equal(optimizer_again["state"][0]["exp_avg"], optimizer["state"][0]["exp_avg"])


def test_train_state_round_trips_whole_with_every_ranks_rng(tmp_path):
    model = Transformer(ModelConfig.preset("tiny", vocab_size=50))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long)).sum().backward()
    optimizer.step()
    first = rng_state()
    torch.rand(5)
    second = rng_state()  # another rank's stream
    state = TrainState(
        step=7,
        elapsed=1.5,
        flops=3e9,
        tokens=123,
        data={"epoch": 2, "index": 5},
        rng=[first, second],
        scaler={"scale": 1024.0, "_growth_tracker": 3},
    )
    save_checkpoint(tmp_path, model, None, optimizer.state_dict(), state, keep=0)
    back, optimizer_state = load_checkpoint(tmp_path / "step-7")
    assert (back.step, back.elapsed, back.flops, back.tokens, back.data, back.scaler) == (
        7,
        1.5,
        3e9,
        123,
        {"epoch": 2, "index": 5},
        state.scaler,
    )
    for saved, loaded in zip([first, second], back.rng):
        assert torch.equal(saved["torch"], loaded["torch"]) and saved["python"] == loaded["python"]
        assert (saved["numpy"][1] == loaded["numpy"][1]).all()
    assert not torch.equal(back.rng[0]["torch"], back.rng[1]["torch"])
    fresh = torch.optim.Adam(model.parameters(), lr=1e-3)
    fresh.load_state_dict(optimizer_state)
    for a, b in zip(fresh.state_dict()["state"].values(), optimizer.state_dict()["state"].values()):
        assert all(torch.equal(a[k], b[k]) for k in b)


# 3. kill -9 while the token store is written: a store that is not whole is detected and built again


def test_a_store_that_is_not_whole_is_not_used(tmp_path):
    from aiayn.data.sources import Source
    from aiayn.data.store import TokenStore, prepare, store_key

    vocab = Vocab.train(read_lines(f"{VAL}.en.gz")[:200] + read_lines(f"{VAL}.de.gz")[:200], 200)
    source = Source(str(VAL), "en", "de")
    key = store_key(source, vocab, 64)
    store = tmp_path / "store"
    prepare(source, vocab, len(vocab), 64, store, key, 1, log=lambda _: None)
    assert TokenStore.is_built(store, key) and not TokenStore.is_built(store, store_key(source, vocab, 63))
    data = (store / "tgt.ids").read_bytes()
    (store / "tgt.ids").write_bytes(data[: len(data) // 2])  # what a kill during a plain write leaves
    assert not TokenStore.is_built(store, key)
    (store / "tgt.ids").write_bytes(data)
    assert TokenStore.is_built(store, key)
    (store / "store.json").unlink()  # killed before store.json, written last
    assert not TokenStore.is_built(store, key)


# 4. a lock on --out

HOLD = (
    "import sys, time; from pathlib import Path; from aiayn.train.run_folder import lock; "
    "f = lock(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)"
)


def test_a_busy_run_folder_is_refused_and_a_stale_lock_does_not_block(run, tmp_path, capsys):
    out = copy_run(run, tmp_path / "run")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(out / "checkpoints")
        refused(capsys, train_args(out, "--train.max_steps=6"), str(out), f"pid {holder.pid}", "another")
        assert snapshot(out / "checkpoints") == before
    finally:
        holder.kill()  # SIGKILL: the lock file stays, the lock goes with the process
        holder.wait()
    assert (out / run_folder.LOCK).read_text().strip() == str(holder.pid)
    assert main(train_args(out, "--train.max_steps=6")) == 0
    assert (out / "checkpoints" / "step-6").is_dir()


def test_out_that_is_a_file_or_under_one_is_one_clear_line(tmp_path, capsys):
    (tmp_path / "file").write_text("mine")
    refused(capsys, train_args(tmp_path / "file"), "file", "not a folder")
    refused(capsys, train_args(tmp_path / "file" / "run"), str(tmp_path / "file"))
    assert (tmp_path / "file").read_text() == "mine"


# 5. the user's recipe file is never written over


def test_the_users_recipe_in_the_run_folder_is_not_written_over(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    recipe = out / "recipe.yaml"
    shutil.copyfile(REPO / "recipes" / "tiny.yaml", recipe)
    text = recipe.read_bytes()
    argv = [
        "train",
        str(recipe),
        "--out",
        str(out),
        f"--data.train={VAL}",
        f"--data.valid={VAL}",
        "--train.max_steps=2",
        "--train.save_every=2",
    ]
    assert main(argv) == 0
    assert main(argv[:-2] + ["--train.max_steps=3", "--train.save_every=3"]) == 0  # and on resume
    assert recipe.read_bytes() == text  # comments and all
    assert "max_steps: 3" in (out / run_folder.RESOLVED).read_text()


# 6. a resume with a changed recipe: data, vocabulary and model refused by name; budgets may change


def test_resume_refuses_changed_data_vocabulary_and_model_fields(run, tmp_path, capsys):
    out = copy_run(run, tmp_path / "run")
    before = snapshot(out)
    refused(
        capsys, train_args(out, "--model.d_model=32", "--model.n_heads=2"), "model.d_model 64 -> 32", "model.n_heads"
    )
    refused(capsys, train_args(out, "--data.vocab_size=400"), "data.vocab_size 300 -> 400")
    refused(capsys, train_args(out, "--data.max_subwords=32"), "data.max_subwords")
    refused(capsys, train_args(out, "--train.batch_tokens=256"), "train.batch_tokens")
    assert snapshot(out) == before
    assert (
        main(
            train_args(
                out,
                "--train.max_steps=6",
                "--train.eval_every=3",
                "--train.log_every=1",
                "--train.keep_checkpoints=9",
                "--train.bleu_sentences=5",
                "--train.threads=1",
            )
        )
        == 0
    )
    assert (out / "checkpoints" / "step-6").is_dir()


# 7. a vocabulary is reused only in a run folder aiayn made, or when the recipe names it


def test_out_at_a_model_directory_is_refused_and_a_named_vocabulary_is_used(run, tmp_path, capsys):
    model = shutil.copytree(run / "model", tmp_path / "opus-mt")
    Vocab.train(read_lines(f"{VAL}.de.gz")[:300], 200).save(model / "spm.model")  # another model's vocabulary
    before = snapshot(model)
    refused(capsys, train_args(model), "spm.model", "--data.vocab")
    assert snapshot(model) == before
    out = tmp_path / "named"
    assert main(train_args(out, f"--data.vocab={model / 'spm.model'}", "--train.max_steps=2")) == 0
    assert (out / "model" / "spm.model").read_bytes() == (model / "spm.model").read_bytes()
    assert not (out / "spm.model").exists()


# 8. translate -i same.txt -o same.txt


def test_translate_refuses_output_onto_its_input(run, tmp_path, capsys):
    text = tmp_path / "same.txt"
    text.write_text("A man.\n")
    os.link(text, tmp_path / "hard-link.txt")
    for output in (text, tmp_path / "." / "same.txt", tmp_path / "hard-link.txt"):
        refused(
            capsys, ["translate", "--model", str(run / "model"), "-i", str(text), "-o", str(output)], "-i", "same file"
        )
    assert text.read_text() == "A man.\n"


# 9. disk full during a checkpoint


def test_disk_full_during_a_checkpoint_keeps_the_earlier_ones(run, tmp_path, capsys, monkeypatch):
    out = copy_run(run, tmp_path / "run")
    before = snapshot(out / "checkpoints")

    def full(tensors, path, *args, **kwargs):
        Path(path).write_bytes(b"\0" * 10)  # part of the file, then no space
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(weights, "save_file", full)  # what a checkpoint's state tensors are written with (save_tensors)
    refused(capsys, train_args(out, "--train.max_steps=6"), "step-6", "No space left on device", "earlier checkpoints")
    assert snapshot(out / "checkpoints") == before  # no .tmp-step-6, step-2 and step-4 intact
    monkeypatch.undo()
    assert main(train_args(out, "--train.max_steps=6")) == 0


def test_disk_full_on_a_real_file_system_is_one_line_and_keeps_the_earlier_checkpoints(run, tmp_path):
    """The run on a small tmpfs (a private mount namespace, as root): the next checkpoint does not fit, and
    safetensors' own writer meets the full disk (no patched writer)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("a small tmpfs needs root and unshare (util-linux) to mount it")
    mnt, kept = tmp_path / "mnt", tmp_path / "kept"
    mnt.mkdir()
    pages = sum(-(-p.stat().st_size // 4096) * 4096 for p in run.rglob("*") if p.is_file())
    checkpoint_bytes = sum(p.stat().st_size for p in (run / "checkpoints" / "step-4").rglob("*") if p.is_file())
    size_kb = (pages + checkpoint_bytes // 2) // 1024 + 64  # the run and half a checkpoint
    argv = " ".join(f"'{a}'" for a in [sys.executable, "-m", "aiayn", *train_args(mnt / "run", "--train.max_steps=6")])
    script = (
        f"mount -t tmpfs -o size={size_kb}k tmpfs '{mnt}' || exit 97\n"
        f"cp -a '{run}' '{mnt}/run' && rm -f '{mnt}/run/{run_folder.LOCK}' || exit 98\n"
        f"{argv} 2> '{tmp_path}/err.txt'; echo $? > '{tmp_path}/rc.txt'\n"
        f"cp -a '{mnt}/run/checkpoints' '{kept}'\n"
    )
    done = subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, timeout=600)
    if done.returncode == 97:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    err = "\n".join(line for line in (tmp_path / "err.txt").read_text().splitlines() if not PROGRESS.search(line))
    assert (tmp_path / "rc.txt").read_text().strip() == "1", err
    assert "Traceback" not in err and 1 <= len(err.strip().splitlines()) <= 2, err
    assert "No space left on device" in err and "step-6" in err, err
    assert snapshot(kept) == snapshot(run / "checkpoints")  # step-2 and step-4 whole, nothing half-written left


def test_average_never_writes_into_a_checkpoint_or_over_a_model_unasked(run, tmp_path, capsys):
    out = copy_run(run, tmp_path / "run")
    step = out / "checkpoints" / "step-4"
    before = snapshot(out / "checkpoints")
    refused(capsys, ["average", str(out), "--last", "2", "--out", str(step)], "input model")
    refused(capsys, ["average", str(out), "--last", "2", "--out", str(out / "model")], "--force")
    assert snapshot(out / "checkpoints") == before
    assert main(["average", str(out), "--last", "2", "--out", str(out / "model"), "--force"]) == 0


# 10. what -o names is written as `> NAME` would write it, never replaced by something else (QA, 2026-12-05)


def test_output_to_a_pipe_a_symlink_or_stdout_writes_there_and_replaces_nothing(run, tmp_path, capsys):
    import threading

    source = tmp_path / "in.txt"
    source.write_text("A man.\n\nTwo dogs.\n")
    translate = ["translate", "--model", str(run / "model"), "-i", str(source), "--beam-size", "1"]
    assert main(translate) == 0
    expected = capsys.readouterr().out
    assert len(expected.splitlines()) == 3
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = {}
    reader = threading.Thread(target=lambda: got.update(text=fifo.read_text()))
    reader.start()
    assert main([*translate, "-o", str(fifo)]) == 0
    reader.join(timeout=60)
    assert got["text"] == expected and stat_kind(fifo) == "fifo"  # still the FIFO: its reader got the lines
    real, link = tmp_path / "real.txt", tmp_path / "link.txt"
    real.write_text("old\n")
    real.chmod(0o600)  # private: it stays so
    link.symlink_to(real)
    assert main([*translate, "-o", str(link)]) == 0
    assert link.is_symlink() and real.read_text() == expected and oct(real.stat().st_mode & 0o777) == "0o600"
    assert main([*translate, "-o", "-"]) == 0 and capsys.readouterr().out == expected and not Path("-").exists()
    log = tmp_path / "log.txt"  # `>> log.txt` with `-o /dev/stdout`: appended to, not renamed over
    log.write_text("earlier\n")
    with open(log, "a") as appended:
        done = subprocess.run(
            [sys.executable, "-m", "aiayn", *translate, "-o", "/dev/stdout"],
            stdout=appended,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert done.returncode == 0, done.stderr
    assert log.read_text() == "earlier\n" + expected
    assert not list(tmp_path.glob(".*.tmp"))


def stat_kind(path: Path) -> str:
    import stat

    mode = path.lstat().st_mode
    return (
        "fifo" if stat.S_ISFIFO(mode) else "link" if stat.S_ISLNK(mode) else "file" if stat.S_ISREG(mode) else "other"
    )


def test_a_read_only_or_hard_linked_output_is_refused_and_left_as_it_was(run, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("A man.\n")
    translate = ["translate", "--model", str(run / "model"), "-i", str(source)]
    locked = tmp_path / "locked.txt"
    locked.write_text("mine\n")
    locked.chmod(0o444)
    refused(capsys, [*translate, "-o", str(locked)], str(locked), "not writable by this user")
    linked, other = tmp_path / "linked.txt", tmp_path / "other-name.txt"
    linked.write_text("mine\n")
    os.link(linked, other)
    refused(capsys, [*translate, "-o", str(linked)], str(linked), "2 hard links")
    assert locked.read_text() == linked.read_text() == other.read_text() == "mine\n"


def test_evaluate_never_saves_its_translations_over_its_own_inputs(run, tmp_path, capsys):
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("A man.\nTwo dogs.\n")
    ref.write_text("Ein Mann.\nZwei Hunde.\n")
    evaluate = ["evaluate", "--model", str(run / "model"), "--src", str(src), "--ref", str(ref)]
    for flag, path in (("--src", src), ("--ref", ref), ("--src", tmp_path / "." / "src.txt")):
        refused(capsys, [*evaluate, "--save-hyp", str(path)], "--save-hyp", f"the same file as {flag}")
    assert src.read_text() == "A man.\nTwo dogs.\n" and ref.read_text() == "Ein Mann.\nZwei Hunde.\n"
    assert main([*evaluate, "--save-hyp", str(tmp_path / "hyp.txt")]) == 0
    assert len((tmp_path / "hyp.txt").read_text().splitlines()) == 2 and not list(tmp_path.glob(".*.tmp"))


def test_sigterm_during_translate_removes_its_half_written_output(run, tmp_path):
    import signal
    import time

    source = tmp_path / "in.txt"
    source.write_text("A man is riding a bike down the street.\n" * 3000)
    out = tmp_path / "out.txt"
    command = [
        sys.executable,
        "-m",
        "aiayn",
        "translate",
        "--model",
        str(run / "model"),
        "-i",
        str(source),
        "-o",
        str(out),
        "--quiet",
    ]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".out.txt.*.tmp")):  # translating, into its temporary file
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    assert "aiayn translate: stopped by SIGTERM" in process.stderr.read()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]  # no output, no hidden temporary


def test_train_sweeps_only_its_own_dead_writers_temporaries(run, tmp_path):
    from aiayn.files import HOST, sweep_temporaries, temporary_beside

    out = copy_run(run, tmp_path / "run")
    users = [out / ".notes.abcdefgh.tmp", out / "model" / ".backup.20241205.tmp"]
    for path in users:
        path.write_text("the user's")
    live = temporary_beside(out / "test.hyp")  # `aiayn translate -o RUN/test.hyp`, still writing
    dead = out / "model" / f".config.json.{HOST}-{dead_pid()}.abcdefgh.aiayn.tmp"  # left by a writer killed with -9
    dead.write_text("{")
    assert main(train_args(out, "--train.max_steps=6")) == 0
    assert all(p.read_text() == "the user's" for p in users) and live.exists() and not dead.exists()
    assert sweep_temporaries(out) == []


def dead_pid() -> int:
    """The id of a process that has ended."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_average_refuses_others_files_mixed_models_and_damaged_checkpoints(run, tmp_path, capsys):
    out = copy_run(run, tmp_path / "run")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "settings"}')
    refused(capsys, ["average", str(out), "--last", "2", "--out", str(mine)], "config.json", "--force")
    assert (mine / "config.json").read_text() == '{"my": "settings"}'
    other = copy_run(run, tmp_path / "other")
    (other / "model" / "spm.model").write_bytes((other / "model" / "spm.model").read_bytes() + b"\0")
    refused(
        capsys,
        ["average", str(out / "model"), str(other / "model"), "--out", str(tmp_path / "a")],
        "another vocabulary",
    )
    config = json_edit(other / "model" / "config.json", d_ff=16)
    refused(
        capsys,
        ["average", str(out / "model"), str(other / "model"), "--out", str(tmp_path / "b")],
        "another model configuration",
        "d_ff",
    )
    config.write_text((out / "model" / "config.json").read_text())
    cut = out / "checkpoints" / "step-4" / weights.WEIGHTS
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size * 2 // 3])  # cut short
    refused(capsys, ["average", str(out), "--last", "2", "--out", str(tmp_path / "c")], str(cut), "unreadable")
    refused(capsys, train_args(out, "--train.max_steps=6"), str(cut), "unreadable", "delete this checkpoint")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def json_edit(path: Path, **model) -> Path:
    import json

    meta = json.loads(path.read_text())
    meta["model"].update(model)
    path.write_text(json.dumps(meta))
    return path


def test_a_start_that_failed_in_its_setup_takes_the_fix_its_error_asks_for(tmp_path, capsys):
    data = tmp_path / "tiny"
    Path(f"{data}.en").write_text("a man runs\ntwo dogs play\n" * 20)
    Path(f"{data}.de").write_text("ein mann rennt\nzwei hunde spielen\n" * 20)
    out = tmp_path / "run"
    args = [
        "train",
        str(REPO / "recipes" / "tiny.yaml"),
        "--out",
        str(out),
        f"--data.train={data}",
        f"--data.valid={data}",
        "--train.max_steps=2",
        "--train.save_every=2",
    ]
    err = refused(capsys, args, "vocab_size")  # far more pieces than this text has
    assert (out / "run.json").is_file()  # the folder is aiayn's run folder from now on
    assert main([*args, "--data.vocab_size=30"]) == 0  # the fix: accepted, though the recipe changed
    assert (out / "checkpoints" / "step-2").is_dir() and "vocab" not in capsys.readouterr().err
    refused(capsys, [*args, "--data.vocab_size=28"], "changed recipe", "data.vocab_size")  # trained: it holds now
    shutil.rmtree(out / "checkpoints")  # a finished run's checkpoints deleted to save space: still a trained run
    refused(capsys, [*args, "--data.vocab_size=28"], "changed recipe", "data.vocab_size")
    assert (out / "spm.model").is_file() and (out / "model").is_dir() and err


def test_a_signal_the_shell_ignores_stays_ignored_and_train_keeps_the_default(monkeypatch):
    """`nohup aiayn ...` ignores SIGHUP: aiayn must not turn it back into a stop; and `train`, which survives any
    kill by design, keeps the system's default handling (its rerun resumes)."""
    import signal

    import aiayn.cli.info as info
    import aiayn.cli.train as train_cli

    seen = {}

    def record(name):
        return lambda args: (
            seen.update({name: (signal.getsignal(signal.SIGHUP), signal.getsignal(signal.SIGTERM))}) or 0
        )

    monkeypatch.setattr(info, "run", record("info"))
    monkeypatch.setattr(train_cli, "run", record("train"))
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert main(["info", "--preset", "tiny"]) == 0
        assert main(["train", str(REPO / "recipes" / "tiny.yaml")]) == 0
    finally:
        signal.signal(signal.SIGHUP, previous)
    hup, term = seen["info"]
    assert hup is signal.SIG_IGN and callable(term)  # SIGTERM, at its default, now cleans up
    assert seen["train"] == (signal.SIG_IGN, signal.SIG_DFL)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # given back
