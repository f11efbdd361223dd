"""The GEMM backend of decoding (issue 18): forced each way, the same translations and logits within 1e-4; oneDNN's kernel caches bounded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn import ONEDNN_CACHE_ENTRIES, ModelConfig, Transformer
from aiayn.data.corpus import read_lines
from aiayn.decode import backend
from aiayn.decode.translate import Translator
from aiayn.io import save_model

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
pytestmark = pytest.mark.skipif(not backend.onednn_available(), reason="this PyTorch build has no oneDNN")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from aiayn.data.vocab import Vocab

    lines = read_lines(DATA / "val.en.gz")[:400] + read_lines(DATA / "val.de.gz")[:400]
    vocab = Vocab.train(lines, 300)
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=len(vocab), max_len=96, final_logits_bias=True))
    with torch.no_grad():
        model.logits_bias[model.config.eos_id] = 1.5  # some outputs end early
    return save_model(model, tmp_path_factory.mktemp("model"), vocab.proto)


def test_each_backend_forced_gives_the_same_translations_and_logits(model_dir, monkeypatch):
    sentences = read_lines(DATA / "test_2016_flickr.en.gz")[:40]
    translators = {name: Translator.load(model_dir, gemm=name) for name in backend.BACKENDS}
    assert {name: t.gemm for name, t in translators.items()} == {"mkl": "mkl", "onednn": "onednn"}
    assert type(translators["onednn"].model.output_proj) is backend.OneDnnProjection
    assert type(translators["onednn"].model.encoder.layers[0].ffn.fc1) is backend.OneDnnLinear
    for beam in (1, 4):
        texts = {name: t.translate(sentences, beam_size=beam) for name, t in translators.items()}
        assert texts["mkl"] == texts["onednn"]
    src = torch.randint(4, 200, (5, 9))
    tgt = torch.randint(4, 200, (5, 7))
    with torch.inference_mode():
        logits = {name: t.model(src, tgt) for name, t in translators.items()}
    assert (logits["mkl"] - logits["onednn"]).abs().max() < 1e-4
    monkeypatch.setenv(backend.ENV, "onednn")  # the environment forces it too
    assert Translator.load(model_dir).gemm == "onednn"
    monkeypatch.setenv(backend.ENV, "fast")
    with pytest.raises(ValueError, match="AIAYN_GEMM: unknown GEMM backend 'fast'"):
        Translator.load(model_dir)


def test_auto_measures_both_and_takes_the_faster(model_dir, monkeypatch):
    seconds = backend.measure(ModelConfig.preset("tiny", vocab_size=300), rows=8, repeats=1)
    assert set(seconds) == {"mkl", "onednn"} and all(s > 0 for s in seconds.values())
    monkeypatch.delenv(backend.ENV, raising=False)
    monkeypatch.setattr(backend, "measure", lambda config, rows, repeats=3: {"mkl": 2.0, "onednn": 1.0})
    assert Translator.load(model_dir).gemm == "onednn"
    monkeypatch.setattr(backend, "measure", lambda config, rows, repeats=3: {"mkl": 1.0, "onednn": 2.0})
    assert Translator.load(model_dir).gemm == "mkl"


def test_auto_takes_onednn_only_where_it_is_clearly_faster(monkeypatch):
    """Its products alone do not show the fresh logits tensor oneDNN returns each step (ONEDNN_MARGIN)."""
    config = ModelConfig.preset("tiny", vocab_size=300)
    monkeypatch.delenv(backend.ENV, raising=False)
    level = {"mkl": 1.12, "onednn": 1.0}  # the AMX host measured 0.95-1.12 and MKL decoded faster
    monkeypatch.setattr(backend, "measure", lambda config, rows, repeats=3: level)
    assert backend.choose(config, rows=128) == "mkl"
    clear = {"mkl": 1.5, "onednn": 1.0}  # the EPYC hosts at 128 rows
    monkeypatch.setattr(backend, "measure", lambda config, rows, repeats=3: clear)
    assert backend.choose(config, rows=128) == "onednn"
    assert backend.choose(config, rows=128, option="mkl") == "mkl"  # forcing still wins


PRODUCTS_OF_MANY_SHAPES = """
import os
from pathlib import Path
import torch
import aiayn
from aiayn.decode.backend import onednn_linear

def resident():
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024

torch.set_num_threads(1)
weight, bias = torch.randn(512, 512), torch.randn(512)
onednn_linear(torch.randn(1, 512), weight, bias)
before = resident()
with torch.inference_mode():
    for rows in range(2, 302):  # a new shape each time, as source lengths and batch sizes make them
        onednn_linear(torch.randn(rows, 512), weight, bias)
print(os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"], os.environ["LRU_CACHE_CAPACITY"], resident() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads resident memory from /proc (Linux)")
def test_onednn_keeps_a_bounded_number_of_compiled_products():
    """Importing aiayn bounds oneDNN's two kernel caches, which otherwise keep 1,024 shapes each: a
    process that meets 300 product shapes grows by less than half as much. A value the user set stays."""
    def run(**caches):
        env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")}
        done = subprocess.run([sys.executable, "-c", PRODUCTS_OF_MANY_SHAPES], capture_output=True, text=True,
                              timeout=300, env={**env, **caches})
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    *bounded, bounded_growth = run()  # nothing set: aiayn's import sets both
    *unbounded, unbounded_growth = run(ONEDNN_PRIMITIVE_CACHE_CAPACITY="1024", LRU_CACHE_CAPACITY="1024")  # as before
    assert bounded == [str(ONEDNN_CACHE_ENTRIES)] * 2 and unbounded == ["1024", "1024"]
    assert int(bounded_growth) < 0.5 * int(unbounded_growth)
