"""The GEMM backend of decoding (issue 18): forced each way, the same translations and logits within 1e-4; oneDNN's kernel caches bounded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn import ModelConfig, Transformer
from aiayn.cpu import backend, gemv
from aiayn.cpu.onednn_caches import ONEDNN_CACHE_ENTRIES
from aiayn.cpu.packed import pack_float32
from aiayn.cpu.step import CpuStep
from aiayn.cpu.vocabulary import PackedProjection
from aiayn.data.sources import read_lines
from aiayn.translator import Translator
from aiayn.weights import save_model

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
pytestmark = pytest.mark.skipif(not backend.onednn_available(), reason="this PyTorch build has no oneDNN")
# aiayn's own product needs a C compiler (tests/test_gemv.py tests both cases); the other backends, PyTorch alone
BACKENDS = [
    name for name in backend.BACKENDS if not backend.uses_gemv(name) or shutil.which(os.environ.get("CC") or "cc")
]


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
    translators = {name: Translator.load(model_dir, gemm=name) for name in BACKENDS}
    assert {name: t.gemm for name, t in translators.items()} == {name: name for name in BACKENDS}
    assert all(CpuStep(t.model).uses_layer_step for t in translators.values())  # a step without training's wrappers
    assert type(translators["onednn"].model.output_proj) is backend.OneDnnProjection
    assert type(translators["onednn"].model.encoder.layers[0].ffn.fc1) is backend.OneDnnLinear
    for name in ("mkl+packed", "onednn+packed"):  # the vocabulary held once, packed: the embeddings read it
        model = translators[name].model
        assert type(model.output_proj) is PackedProjection and model.logits_bias is not None
        assert model.encoder.embed.vocabulary is model.decoder.embed.vocabulary is model.output_proj.vocabulary
        assert not any(p.size(0) == model.config.target_vocab_size for p in model.parameters())
    packed = translators["onednn+packed"].model  # with oneDNN's layers, the decoder's matrices packed too
    assert (
        type(packed.encoder.layers[0].ffn.fc1) is backend.OneDnnLinear
        and packed.encoder.layers[0].ffn.fc1.weight.dim() == 2
    )
    decoder_linears = [m for m in packed.decoder.modules() if isinstance(m, backend.OneDnnLinear)]
    assert len(decoder_linears) == 10 * packed.config.decoder.layers
    assert all("weight" not in m._parameters and m.packed.is_mkldnn for m in decoder_linears)
    assert not [p for p in packed.decoder.parameters() if p.dim() == 2]  # held once: packed, not also plain
    assert all(
        m.weight.dim() == 2 for m in translators["mkl+packed"].model.decoder.modules() if isinstance(m, torch.nn.Linear)
    )
    if "onednn+gemv" in translators:  # a step's products on aiayn's own, on the matrices as stored; a batch's on oneDNN
        model = translators["onednn+gemv"].model
        own = {name for name, m in model.named_modules() if isinstance(m, gemv.GemvLinear)}
        assert len(own) == 8 * model.config.decoder.layers and not any(
            name.endswith(("cross_attn.k_proj", "cross_attn.v_proj")) for name in own
        )
        assert type(model.output_proj) is gemv.GemvProjection and model.output_proj.matrix is model.decoder.embed.weight
        assert type(model.encoder.layers[0].ffn.fc1) is backend.OneDnnLinear
    for model in (translators["onednn"].model, packed):  # the products of a batch's every token: row-bucketed
        linears = {name: m for name, m in model.named_modules() if isinstance(m, backend.OneDnnLinear)}
        once_a_batch = {
            name
            for name in linears
            if name.startswith("encoder.") or name.endswith(("cross_attn.k_proj", "cross_attn.v_proj"))
        }
        assert {name for name, m in linears.items() if m.bucketed} == once_a_batch
        assert len(once_a_batch) == 6 * model.config.encoder.layers + 2 * model.config.decoder.layers
    for beam in (1, 4):
        texts = {name: t.translate(sentences, beam_size=beam) for name, t in translators.items()}
        assert all(texts[name] == texts["mkl"] for name in BACKENDS)
    src = torch.randint(4, 200, (5, 9))
    tgt = torch.randint(4, 200, (5, 7))
    with torch.inference_mode():
        logits = {name: t.model(src, tgt) for name, t in translators.items()}
    assert all((logits[name] - logits["mkl"]).abs().max() < 1e-4 for name in BACKENDS)
    monkeypatch.setenv(backend.ENV, "onednn")  # the environment forces it too
    assert Translator.load(model_dir).gemm == "onednn"
    monkeypatch.setenv(backend.ENV, "fast")
    with pytest.raises(ValueError, match="AIAYN_GEMM: unknown GEMM backend 'fast'"):
        Translator.load(model_dir)


@pytest.mark.parametrize("packed_rows", [None, 4])
def test_a_row_bucketed_product_is_the_plain_product_of_each_row(packed_rows, monkeypatch):
    """Run BUCKETED_ROWS rows at a time, each piece padded to a multiple of ROW_BUCKET rows (a few compiled
    shapes for every batch's token count), the rows given are those of x W^T + b, in x's shape; oneDNN is
    never asked for another row count."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 40)
    bucketed = backend.OneDnnLinear(linear, packed_rows, bucketed=True)
    asked, product = [], backend.onednn_linear
    monkeypatch.setattr(
        backend, "onednn_linear", lambda x, w, b: asked.append(x.numel() // x.size(-1)) or product(x, w, b)
    )
    many = 2 * backend.BUCKETED_ROWS
    for shape in [
        (1, 48),
        (9, 48),
        (16, 48),
        (3, 7, 48),
        (backend.BUCKETED_ROWS, 48),
        (backend.BUCKETED_ROWS + 1, 48),
        (many, 48),
        (many + 5, 48),
        (4, 83, 48),
        (2, 0, 48),
        "strided",
    ]:
        x = torch.randn(48, 300).t() if shape == "strided" else torch.randn(shape)  # (300, 48), not contiguous
        shape = tuple(x.shape)
        with torch.inference_mode():
            y = bucketed(x)
        assert y.shape == (*shape[:-1], 40) and y.is_contiguous()
        torch.testing.assert_close(y, linear(x), atol=1e-5, rtol=1e-5)
    assert set(asked) <= set(range(backend.ROW_BUCKET, backend.BUCKETED_ROWS + 1, backend.ROW_BUCKET)) | {0}


def test_auto_measures_both_and_takes_the_faster(model_dir, monkeypatch):
    seconds = backend.measure(ModelConfig.preset("tiny", vocab_size=300), rows=8, repeats=1)
    assert set(seconds) == set(BACKENDS) - {"onednn+gemv"} and all(s > 0 for s in seconds.values())
    seconds = backend.measure(ModelConfig.preset("tiny", vocab_size=300), rows=4, repeats=1)  # batch 1: its own too
    assert set(seconds) == set(BACKENDS) and all(s > 0 for s in seconds.values())
    monkeypatch.delenv(backend.ENV, raising=False)
    monkeypatch.setattr(backend, "measure", lambda config, rows, repeats=3: {"mkl": 2.0, "onednn": 1.0})
    assert Translator.load(model_dir).gemm == "onednn"
    monkeypatch.setattr(backend, "measure", lambda config, rows, repeats=3: {"mkl": 1.0, "onednn": 2.0})
    assert Translator.load(model_dir).gemm == "mkl"


def test_the_measure_multiplies_the_matrices_a_decoder_layer_multiplies_at_a_step():
    """`step_matrices`, which `measure` times, are the shapes of a decoder layer's weights but for the
    encoder-decoder attention's W^K and W^V, which project the encoder's output once a batch."""
    config = ModelConfig.preset("tiny", vocab_size=300).replace(d_k=24, d_v=40, d_decoder_ff=96)
    layer = Transformer(config).decoder.layers[0]
    stepped = [
        m.weight.shape
        for name, m in layer.named_modules()
        if isinstance(m, torch.nn.Linear) and name not in ("cross_attn.k_proj", "cross_attn.v_proj")
    ]
    assert sorted(tuple(s) for s in stepped) == sorted(backend.step_matrices(config))


MEASURE_AT_ONE_ROW = """
from pathlib import Path
import torch
from aiayn import ModelConfig
from aiayn.cpu import backend

def resident():
    return int(next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS:")).split()[1]) // 1024

torch.set_num_threads(1)
config = ModelConfig(vocab_size=58101)  # opus-mt-en-de's shapes: 88 MB of decoder matrices, a 119 MB vocabulary
before = resident()
backend.measure(config, rows=1, repeats=1)
print(resident() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads resident memory from /proc (Linux)")
def test_the_measure_gives_its_stand_in_matrices_back_before_the_model_loads():
    """At few rows `measure` multiplies every decoder layer's matrices and the whole vocabulary; glibc keeps
    freed blocks of up to 32 MiB, which held 48-104 MiB under a batch-1 model on a 2-core EPYC host."""
    done = subprocess.run([sys.executable, "-c", MEASURE_AT_ONE_ROW], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) < 30  # MiB left resident: oneDNN's kernels and the library's pages


MEASURE_AT_32_ROWS = """
import sys
from pathlib import Path
import torch
from aiayn import ModelConfig
from aiayn.cpu import backend

def anonymous():
    return int(next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("RssAnon:")).split()[1]) // 1024

torch.set_num_threads(2)
if sys.argv[1] == "kept":  # as before `measure` gave MKL's buffers back
    backend.free_mkl_buffers = lambda: False
before = anonymous()
backend.measure(ModelConfig(vocab_size=58101), rows=32, repeats=1)
print(anonymous() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads resident memory from /proc (Linux)")
@pytest.mark.skipif(backend._mkl_free_buffers() is None, reason="this PyTorch has no MKL whose buffers aiayn can free")
def test_the_measure_gives_back_the_buffers_mkl_kept_for_its_next_product():
    """MKL keeps the buffers it packed operands into; after timing it at 32 rows on opus-mt's shapes, 10-17 MiB
    of them stayed resident on a 2-core EPYC host, under a model oneDNN then decodes. Anonymous memory only:
    the library code paged in is not the engine's data."""

    def left(mode):
        env = {k: v for k, v in os.environ.items() if k != "MKL_DISABLE_FAST_MM"}  # which would keep no pool at all
        done = subprocess.run(
            [sys.executable, "-c", MEASURE_AT_32_ROWS, mode], capture_output=True, text=True, timeout=300, env=env
        )
        assert done.returncode == 0, done.stderr
        return int(done.stdout.split()[-1])

    kept, given_back = left("kept"), left("given back")
    assert given_back < 8 and kept > given_back + 4, (kept, given_back)  # MiB: 4 left (oneDNN's kernels) against 17


def test_auto_takes_onednn_by_a_margin_where_its_fresh_logits_are_large_and_else_where_faster(monkeypatch):
    """Its products alone do not show the fresh logits tensor oneDNN returns each step (ONEDNN_MARGIN),
    which costs nothing measurable while small (SMALL_LOGITS_BYTES)."""
    config = ModelConfig.preset("tiny", vocab_size=58101)  # opus-mt's vocabulary: 28 MiB of logits at 128 rows
    monkeypatch.delenv(backend.ENV, raising=False)
    level = {"mkl": 1.12, "onednn": 1.0}  # the AMX host measured 0.95-1.12 and MKL decoded faster
    monkeypatch.setattr(backend, "measure", lambda config, rows, repeats=3: level)
    assert backend.choose(config, rows=128) == "mkl"
    assert backend.choose(config, rows=1) == "onednn"  # 227 KiB of logits: the faster
    one_row = {"mkl": 1.246, "onednn": 1.0}  # an EPYC host at 1 row, where oneDNN decoded 1.25-1.4x faster
    monkeypatch.setattr(backend, "measure", lambda config, rows, repeats=3: one_row)
    assert backend.choose(config, rows=1) == backend.choose(config, rows=4) == "onednn"
    clear = {"mkl": 1.5, "onednn": 1.0}  # the EPYC hosts at 128 rows
    monkeypatch.setattr(backend, "measure", lambda config, rows, repeats=3: clear)
    assert backend.choose(config, rows=128) == "onednn"
    assert backend.choose(config, rows=128, option="mkl") == "mkl"  # forcing still wins


def test_auto_packs_the_vocabulary_where_faster_and_by_a_margin_where_its_fresh_logits_are_large(
    model_dir, monkeypatch
):
    """Packed, the vocabulary's logits come back as a fresh tensor each step: free while small (up to
    SMALL_LOGITS_BYTES), a cost at beam 4 x batch 32 x 58,101 pieces, where MKL writes into a buffer."""
    opus = ModelConfig.preset("tiny", vocab_size=58101)  # measure is replaced: only the shapes count
    monkeypatch.delenv(backend.ENV, raising=False)

    def measured(seconds):
        monkeypatch.setattr(backend, "measure", lambda config, rows, repeats=3: seconds)

    measured({"mkl": 8.4, "onednn": 8.7, "mkl+packed": 5.7, "onednn+packed": 7.1})  # beam 4, batch 1
    assert backend.choose(opus, rows=4) == "mkl+packed"  # oneDNN's layers are the slower: MKL's stay
    measured({"mkl": 3.9, "onednn": 4.7, "mkl+packed": 4.4, "onednn+packed": 4.6})  # greedy, batch 1
    assert backend.choose(opus, rows=1) == "mkl"
    measured({"mkl": 16.4, "onednn": 16.4, "mkl+packed": 15.9, "onednn+packed": 15.0})  # greedy, batch 32: 7.1 MiB
    assert backend.choose(opus, rows=32) == "mkl+packed"
    measured({"mkl": 39.0, "onednn": 41.6, "mkl+packed": 38.5, "onednn+packed": 40.6})  # beam 4, batch 32: 28 MiB
    assert backend.choose(opus, rows=128) == "mkl"
    measured({"mkl": 39.0, "onednn": 41.6, "mkl+packed": 30.0, "onednn+packed": 40.6})
    assert backend.choose(opus, rows=128) == "mkl+packed"
    measured({"mkl": 60.0, "onednn": 40.0, "mkl+packed": 59.0, "onednn+packed": 39.0})  # EPYC: fresh logits anyway
    assert backend.choose(opus, rows=128) == "onednn+packed"
    measured({"mkl": 9.0, "onednn": 9.5, "mkl+packed": 6.0, "onednn+packed": 6.5})
    translator = Translator.load(model_dir, batch_size=1)
    assert translator.gemm == "mkl+packed" and type(translator.model.output_proj) is PackedProjection


@pytest.mark.parametrize("V, D", [(300, 64), (1003, 250), (37, 48)])
def test_packed_float32_reads_back_every_row_and_multiplies_as_the_plain_matrix(V, D):
    weight = torch.randn(V, D)
    packed = pack_float32(weight, rows_hint=4)
    assert packed is not None
    ids = torch.randint(0, V, (3, 5))
    assert torch.equal(packed.rows(ids), weight[ids])
    assert packed.blocks.untyped_storage().data_ptr() == torch.ops.mkldnn.data_ptr(packed.packed)  # no copy
    for rows in (1, 4, 33):
        x, bias = torch.randn(rows, D), torch.randn(V)
        assert torch.allclose(packed.product(x, bias), x @ weight.t() + bias, atol=1e-4)


def test_packing_reads_a_mapped_matrix_a_block_at_a_time_and_checks_the_layout_by_a_product(tmp_path, monkeypatch):
    """The vocabulary is packed from its file's map, released after each block (never all in memory beside
    its packing), and a layout that oneDNN does not use is caught by the product check: no packing then."""
    from safetensors.torch import save_file

    from aiayn.cpu import packed as packed_module
    from aiayn.cpu.memory import MappedReads

    weight = torch.randn(1000, 96)
    save_file({"vocab": weight}, tmp_path / "w.safetensors")
    maps = MappedReads()
    mapped = maps.read(tmp_path / "w.safetensors")["vocab"]
    releases = []
    packed = pack_float32(mapped, rows_hint=4, rows_at_once=256, release=lambda: releases.append(1))
    assert packed is not None and len(releases) == 4  # 1,000 rows, 256 at a time
    assert torch.equal(packed.rows(torch.arange(1000)), weight)
    monkeypatch.setattr(packed_module, "_layout", lambda *args: (16, 1))  # the wrong block width
    assert pack_float32(weight, rows_hint=4) is None


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the process's maps from /proc (Linux)")
def test_a_packed_translator_holds_nothing_of_the_file_and_one_vocabulary(model_dir):
    import gc

    translator = Translator.load(model_dir, gemm="mkl+packed")
    model = translator.model
    V = model.config.target_vocab_size
    gc.collect()
    weights = str(Path(model_dir) / "model.safetensors")
    assert not [
        line for line in Path("/proc/self/maps").read_text().splitlines() if line.endswith(weights)
    ]  # no map left
    assert not [
        t for t in (*model.parameters(), *model.buffers()) if t.dim() == 2 and t.size(0) == V
    ]  # no (V, D) matrix
    ids = torch.tensor([[5, 6, 7]])
    plain = Translator.load(model_dir, gemm="mkl").model
    assert torch.equal(model.encoder.embed(ids), plain.encoder.embed(ids))


PRODUCTS_OF_MANY_SHAPES = """
import os
from pathlib import Path
import torch
from aiayn.cpu.backend import onednn_linear

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
    """Importing aiayn's CPU package bounds oneDNN's two kernel caches, which otherwise keep 1,024 shapes each: a
    process that meets 300 product shapes grows by less than half as much. A value the user set stays."""

    def run(**caches):
        env = {
            k: v for k, v in os.environ.items() if k not in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
        }
        done = subprocess.run(
            [sys.executable, "-c", PRODUCTS_OF_MANY_SHAPES],
            capture_output=True,
            text=True,
            timeout=300,
            env={**env, **caches},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    *bounded, bounded_growth = run()  # nothing set: aiayn.cpu's import sets both
    *unbounded, unbounded_growth = run(ONEDNN_PRIMITIVE_CACHE_CAPACITY="1024", LRU_CACHE_CAPACITY="1024")  # as before
    assert bounded == [str(ONEDNN_CACHE_ENTRIES)] * 2 and unbounded == ["1024", "1024"]
    assert int(bounded_growth) < 0.5 * int(unbounded_growth)


CACHE_FOR_TRANSLATION = """
import os
import torch
from aiayn.cpu.backend import caches_for_translation, onednn_linear

if "AFTER_IMPORT" in os.environ:  # a program's own size, set after importing aiayn
    os.environ["LRU_CACHE_CAPACITY"] = os.environ["AFTER_IMPORT"]
set_here = caches_for_translation()
weight = torch.randn(64, 32)
for rows in range(1, 21):  # 20 shapes: more than 16 entries hold, fewer than 64
    onednn_linear(torch.randn(rows, 32), weight, None)
print("AGAIN", flush=True)
onednn_linear(torch.randn(1, 32), weight, None)  # the first shape again: still compiled, or compiled anew
print(",".join(set_here), os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY"), os.environ["LRU_CACHE_CAPACITY"], flush=True)
"""


@pytest.mark.skipif(not backend.onednn_available(), reason="this PyTorch build has no oneDNN")
def test_a_process_that_only_translates_keeps_fewer_compiled_products_unless_the_user_set_them():
    """`caches_for_translation` (the translate and serve commands) sets both caches to 16 before oneDNN first
    runs: a 21st shape pushes the first out, where aiayn's 64 keep it. A size the user gives stays, in the
    environment or set after importing aiayn; one inherited from a process that set it through aiayn
    (AIAYN_SET_CACHES records those) is aiayn's."""

    def run(**caches):
        env = {
            k: v
            for k, v in os.environ.items()
            if k
            not in (
                "ONEDNN_PRIMITIVE_CACHE_CAPACITY",
                "LRU_CACHE_CAPACITY",
                "AIAYN_SET_CACHES",
                "DNNL_PRIMITIVE_CACHE_CAPACITY",
            )
        }
        done = subprocess.run(
            [sys.executable, "-c", CACHE_FOR_TRANSLATION],
            capture_output=True,
            text=True,
            timeout=300,
            env={**env, "ONEDNN_VERBOSE": "profile_create", **caches},
        )
        assert done.returncode == 0, done.stderr
        if "onednn_verbose" not in done.stdout:
            pytest.skip("this oneDNN prints no ONEDNN_VERBOSE=profile_create lines")
        after = done.stdout.split("AGAIN", 1)[1].splitlines()
        again = [line for line in after if line.startswith("onednn_verbose") and ",create:" in line]
        assert len(again) == 1, done.stdout[-2000:]
        return again[0].split(",create:")[1].split(",")[0], after[-1].split()

    both = "ONEDNN_PRIMITIVE_CACHE_CAPACITY,LRU_CACHE_CAPACITY"
    assert run() == ("cache_miss", [both, "16", "16"])
    kept = run(ONEDNN_PRIMITIVE_CACHE_CAPACITY="64", LRU_CACHE_CAPACITY="64")
    assert kept == ("cache_hit", ["64", "64"])
    # started by a process that imported aiayn.cpu: the 64 it inherits are aiayn's, not the user's
    record = "ONEDNN_PRIMITIVE_CACHE_CAPACITY=64,LRU_CACHE_CAPACITY=64"
    inherited = run(ONEDNN_PRIMITIVE_CACHE_CAPACITY="64", LRU_CACHE_CAPACITY="64", AIAYN_SET_CACHES=record)
    assert inherited == ("cache_miss", [both, "16", "16"])
    one = run(ONEDNN_PRIMITIVE_CACHE_CAPACITY="64", LRU_CACHE_CAPACITY="48", AIAYN_SET_CACHES=record)  # 48: the user's
    assert one[1] == ["ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16", "48"]
    assert run(AFTER_IMPORT="128")[1] == ["ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16", "128"]
    older = run(DNNL_PRIMITIVE_CACHE_CAPACITY="64")  # oneDNN's older name for its cache: the user's, kept
    assert older == ("cache_hit", ["LRU_CACHE_CAPACITY", "None", "16"])


def test_a_process_started_from_a_translating_one_gets_the_library_size_not_the_translation_size():
    """A process started from one that called `caches_for_translation` inherits 16 and aiayn's record of it:
    importing aiayn's CPU package there sets 64 again, as for any process that did not ask for 16."""
    from aiayn.cpu.onednn_caches import RECORD

    env = {
        **os.environ,
        "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "16",
        "LRU_CACHE_CAPACITY": "32",
        RECORD: "ONEDNN_PRIMITIVE_CACHE_CAPACITY=16,LRU_CACHE_CAPACITY=16",
    }  # 32: a size of the user's
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, aiayn.cpu; print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'], "
            "os.environ['LRU_CACHE_CAPACITY'], os.environ['AIAYN_SET_CACHES'])",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["64", "32", "ONEDNN_PRIMITIVE_CACHE_CAPACITY=64"]


def test_the_translate_and_serve_commands_size_the_caches_before_the_model_loads(model_dir, tmp_path, monkeypatch):
    """Both commands call `caches_for_translation` before `Translator.load`, where oneDNN first runs."""
    from aiayn.cli import main
    from aiayn.serve import app

    calls = []
    monkeypatch.setattr(backend, "caches_for_translation", lambda: calls.append("caches"))
    load = Translator.load

    def recorded(*args, **kwargs):
        calls.append("load")
        return load(*args, **kwargs)

    monkeypatch.setattr(Translator, "load", recorded)
    (tmp_path / "in.txt").write_text("a b c\n")
    assert (
        main(["translate", "--model", str(model_dir), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")])
        == 0
    )
    assert calls == ["caches", "load"]
    calls.clear()

    def load_and_stop(models, *args, **kwargs):  # the server's loading thread, then stop there
        models[0].load()
        raise SystemExit(0)

    monkeypatch.setattr(app, "build_app", load_and_stop)
    with pytest.raises(SystemExit):
        main(["serve", "--model", str(model_dir), "--port", "0"])
    assert calls == ["caches", "load"]


def test_a_backend_is_three_choices_spelt_as_before():
    """Gemm: the layers' library, the packed matrices, aiayn's own product; the spellings of the command line,
    AIAYN_GEMM, /api/model and checkpoints read and written back unchanged, and what cannot go together refused."""
    from aiayn.cpu.backend import BACKENDS, Gemm

    for name in BACKENDS:
        assert str(Gemm.parse(name)) == name
    assert Gemm.parse("onednn+packed") == Gemm("onednn", packed=True)
    assert Gemm.parse("onednn+gemv") == Gemm("onednn", gemv=True)
    for bad in ("blas", "mkl+gemv", "onednn+packed+gemv", "mkl+fast", "mkl+packed+packed"):
        with pytest.raises(ValueError, match="GEMM backend"):
            Gemm.parse(bad)
