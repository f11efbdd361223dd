"""Models by Hugging Face hub id (`model_folder.resolve`): read from a hub cache laid out here, offline.

Nothing is fetched from the network: the cache is huggingface_hub's layout (models--OWNER--NAME/refs/main holding a
commit, snapshots/COMMIT/ the files) filled from a tiny local model, and HF_HUB_OFFLINE is set; the one "online"
test replaces snapshot_download by a fake that applies the allow-patterns to a repository's file list.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import huggingface_hub
import huggingface_hub.constants
import pytest
from huggingface_hub.utils import filter_repo_objects

from aiayn.cli import main
from aiayn.model_folder import HUB_FILES, hub_id, resolve
from aiayn.translator import Translator
from test_translate import LINES, build_tiny_model_dir, data_dir  # noqa: F401  (a fixture)

REPO = Path(__file__).resolve().parents[1]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TINY, VAL = REPO / "recipes" / "tiny.yaml", REPO.parent / "shared" / "data" / "multi30k" / "val"
SEARCH = dict(beam_size=2, max_len=10)  # short outputs: a random model's run to the length cap


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, data_dir) -> Path:  # noqa: F811
    return build_tiny_model_dir(tmp_path_factory.mktemp("tiny"), data_dir)


@pytest.fixture(scope="module")
def expected(model_dir) -> list[str]:
    """LINES translated by the folder itself."""
    return Translator.load(model_dir, **SEARCH).translate(LINES)


@pytest.fixture
def hub(tmp_path, monkeypatch) -> Path:
    """An empty hub cache that this process (huggingface_hub reads its settings at import) and the processes it
    starts read, offline."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def lay_out(cache: Path, repo: str, model: Path) -> Path:
    """repo in huggingface_hub's cache, its main branch at COMMIT holding model's files; the snapshot folder."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = shutil.copytree(model, root / "snapshots" / COMMIT)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(COMMIT)
    return snapshot


def test_a_hub_id_is_read_from_the_cache_and_translates_as_its_folder_does(model_dir, expected, hub):
    snapshot = lay_out(hub, "owner/tiny", model_dir)
    assert resolve("owner/tiny") == snapshot
    assert resolve(f"owner/tiny@{COMMIT}") == snapshot  # a revision: here the commit itself
    assert Translator.load("owner/tiny", **SEARCH).translate(LINES) == expected
    assert len({line for line in expected if line}) >= 3


def test_the_cli_translates_a_hub_id_offline(model_dir, expected, hub, tmp_path):
    lay_out(hub, "owner/tiny", model_dir)
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "aiayn", "translate", "--model", "owner/tiny", "-i", str(source), "-o", str(out)]
    done = subprocess.run(
        [*command, "-b", "2", "--max-len", "10", "-q"],
        cwd=REPO,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.read_text(encoding="utf-8").splitlines() == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["translate", "--model", "owner/absent"],
        ["evaluate", "--model", "owner/absent", "--src", "{tmp}/in.txt", "--ref", "{tmp}/in.txt"],
        ["parse", "--model", "owner/absent"],
        ["convert", "owner/absent", "{tmp}/out", "--to", "aiayn"],
        ["paper", "--model", "owner/absent", "--out", "{tmp}/paper"],
        ["info", "--model", "owner/absent"],
        ["serve", "--model", "en-de=owner/absent", "--port", "0"],
        [
            "train",
            str(TINY),
            "--init",
            "owner/absent",
            "--out",
            "{tmp}/run",
            f"--data.train={VAL}",
            f"--data.valid={VAL}",
        ],
    ],
)
def test_an_id_neither_here_nor_cached_offline_is_one_line_saying_how_to_fetch_it(hub, tmp_path, capsys, argv):
    (tmp_path / "in.txt").write_text("A dog.\n")
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"aiayn {argv[0]}: error: owner/absent: no such folder here")
    assert f"Hugging Face cache ({hub})" in err and "HF_HUB_OFFLINE" in err and "`hf download owner/absent`" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hub", "in.txt"]  # no output begun


def test_offline_in_a_process_of_its_own_no_traceback(hub, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "aiayn", "translate", "--model", "Helsinki-NLP/opus-mt-en-de"],
        cwd=REPO,
        env=os.environ,
        input="A dog.\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("aiayn translate: error: Helsinki-NLP/opus-mt-en-de: no such folder here")
    assert "`hf download Helsinki-NLP/opus-mt-en-de`" in done.stderr


def test_a_local_folder_named_like_a_hub_id_wins(model_dir, expected, hub, tmp_path, monkeypatch):
    lay_out(hub, "owner/tiny", model_dir)
    shutil.copytree(model_dir, tmp_path / "owner" / "tiny")
    monkeypatch.chdir(tmp_path)

    def no_hub(*args, **kwargs):
        raise AssertionError("the hub was asked for a local folder")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_hub)
    assert resolve("owner/tiny") == Path("owner/tiny")
    assert Translator.load("owner/tiny", **SEARCH).translate(LINES) == expected


def test_names_that_are_not_hub_ids_are_folders_that_do_not_exist(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for name in ("Helsinki-NLP/opus-mt-en-de", "a.b_c/d-e@v1.0", "owner/name@refs/pr/1"):
        assert hub_id(name) is not None, name
    for name in (str(tmp_path / "none"), "./model", "../model", "runs/x/model", "a--b/c", "a/b..c", ".a/b", "a/b.git"):
        assert hub_id(name) is None, name
        with pytest.raises(FileNotFoundError, match="no such model directory"):
            resolve(name)
    for name in ("opus-mt-en-de", "model", "runs/base"):  # a bare name, or a folder under one here: not made yet
        assert hub_id(name) is None, name
        assert hub_id(name) is None, name
        with pytest.raises(FileNotFoundError, match="no such model directory"):
            resolve(name)


@pytest.mark.parametrize("safetensors", [True, False])
def test_only_the_files_aiayn_reads_are_fetched(tmp_path, monkeypatch, safetensors):
    """An opus-mt repository holds TensorFlow, Flax and Rust weights too: never fetched; pytorch_model.bin only
    where there are no safetensors weights."""
    read = ["config.json", "generation_config.json", "source.spm", "target.spm", "vocab.json", "tokenizer_config.json"]
    others = ["tf_model.h5", "flax_model.msgpack", "rust_model.ot", "README.md", ".gitattributes", "metadata.json"]
    remote = read + others + ["pytorch_model.bin"] + ["model.safetensors"] * safetensors
    fetched: list[str] = []

    def snapshot_download(repo_id, *, revision=None, allow_patterns=None, **kwargs):
        assert repo_id == "Helsinki-NLP/opus-mt-en-de" and revision in (None, COMMIT)
        folder = tmp_path / "snapshots" / COMMIT
        folder.mkdir(parents=True, exist_ok=True)
        for name in filter_repo_objects(remote, allow_patterns=allow_patterns):
            text = '{"model_type": "marian"}' if name == "config.json" else "x"
            (folder / name).write_text(text)
            fetched.append(name)
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert resolve("Helsinki-NLP/opus-mt-en-de") == tmp_path / "snapshots" / COMMIT
    assert fetched[0] == "config.json"  # first, alone: read before any weights
    assert sorted(fetched[1:]) == sorted(read + (["model.safetensors"] if safetensors else ["pytorch_model.bin"]))
    assert not set(others) & set(filter_repo_objects(others, allow_patterns=HUB_FILES))


def test_a_repository_that_is_no_model_aiayn_reads_is_refused_before_its_weights(tmp_path, monkeypatch):
    fetched: list[str] = []

    def snapshot_download(repo_id, *, revision=None, allow_patterns=None, **kwargs):
        folder = tmp_path / "snapshots" / COMMIT
        folder.mkdir(parents=True, exist_ok=True)
        for name in filter_repo_objects(["config.json", "model.safetensors"], allow_patterns=allow_patterns):
            (folder / name).write_text('{"model_type": "gpt2"}')
            fetched.append(name)
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(ValueError, match="openai-community/gpt2 is neither a Marian"):
        resolve("openai-community/gpt2")
    assert fetched == ["config.json"]
