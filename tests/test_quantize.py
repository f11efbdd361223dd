"""int8 translation weights (aiayn.cpu.quantize): exact integer arithmetic, one int8 vocabulary."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch

from aiayn.config import DecodeConfig, ModelConfig
from aiayn.cpu import packed
from aiayn.cpu.quantize import Int8Vocabulary, quantize_int8
from aiayn.cpu.step import CpuStep
from aiayn.cpu.vocabulary import VocabularyEmbedding
from aiayn.decode.beam import beam_search
from aiayn.model import Transformer
from aiayn.weights import save_model

# oneDNN's int8 packing, where aiayn reads its layout back: not on every CPU (an AVX2-only one packs otherwise, and
# the vocabulary stays in plain rows there).
PACKS = (
    packed.available()
    and packed.pack(torch.arange(256 * 64).remainder(255).sub(127).to(torch.int8).view(256, 64)) is not None
)
ONEDNN = pytest.param(True, marks=pytest.mark.skipif(not PACKS, reason="no oneDNN int8 packing aiayn reads here"))


@pytest.mark.parametrize("onednn", [ONEDNN, False], ids=["packed", "plain"])
def test_vocabulary_rows_are_the_float_rows_to_half_a_step(onednn):
    weight = torch.randn(300, 48)
    weight[7] = 0.0  # a zero row (padding) stays zero
    vocab = Int8Vocabulary(weight, rows_at_once=64, onednn=onednn)  # several blocks
    assert (vocab.packed is not None) == onednn  # packed and read back wherever oneDNN is there
    assert (vocab.weight is None) == onednn  # the vocabulary is held once
    step = weight.abs().amax(dim=1, keepdim=True) / 127  # (V, 1) one int8 step of each row
    ids = torch.tensor([[0, 7, 299], [5, 5, 64]])
    every = vocab.int8_rows(torch.arange(300))
    assert vocab.shape == (300, 48) and every.dtype == torch.int8 and every.abs().max() == 127
    assert torch.equal(every, torch.round(weight / vocab.scale[:, None]).to(torch.int8))
    assert vocab.rows(ids).shape == (2, 3, 48)
    assert ((vocab.rows(ids) - weight[ids]).abs() <= step[ids] / 2 + 1e-7).all()
    assert torch.equal(vocab.rows(torch.tensor(7)), torch.zeros(48))


@pytest.mark.parametrize("onednn", [ONEDNN, False], ids=["packed", "plain"])
def test_vocabulary_product_is_int8_times_int8_then_the_two_scales(onednn):
    weight, x, bias = torch.randn(300, 48), torch.randn(5, 48), torch.randn(300)
    vocab = Int8Vocabulary(weight, onednn=onednn)
    x_scale = x.abs().max() / 127
    x_int8 = torch.round(x / x_scale)  # what the product multiplies, as floats
    w_int8 = torch.round(weight / vocab.scale[:, None])
    expected = (x_int8 @ w_int8.t()) * (vocab.scale * x_scale)  # integer sums below 2^24: exact in float32
    out = torch.full((5, 300), float("nan"))
    got = vocab.product(x, out=out)
    assert got.data_ptr() == out.data_ptr()  # written into the caller's buffer
    # the same int32 sums; oneDNN may apply the two scales in another order (one rounding apart)
    torch.testing.assert_close(got, expected, rtol=2e-7, atol=0)
    torch.testing.assert_close(vocab.product(x), expected, rtol=2e-7, atol=0)
    torch.testing.assert_close(vocab.product(x, out, bias), expected + bias, rtol=1e-6, atol=1e-6)
    assert (expected - x @ weight.t()).abs().max() < 0.05 * (x @ weight.t()).abs().max()


def test_packed_and_plain_vocabularies_give_the_same_logits_and_translations():
    """The oneDNN packing changes where the matrix lives and how fast it multiplies, not the results."""
    if not PACKS:
        pytest.skip("no oneDNN int8 packing aiayn reads here")
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=200)).eval()
    src = torch.randint(4, 200, (4, 9))
    models = {}
    for onednn in (True, False):
        copy = Transformer(model.config).eval()
        copy.load_state_dict(model.state_dict())
        with mock.patch("aiayn.cpu.quantize.pack", packed.pack if onednn else lambda weight: None):
            models[onednn] = quantize_int8(copy)
    assert (
        models[True].output_proj.vocabulary.packed is not None and models[False].output_proj.vocabulary.packed is None
    )
    with torch.inference_mode():
        logits = {k: m(src, src) for k, m in models.items()}
        hyps = {k: beam_search(CpuStep(m), src, DecodeConfig(beam_size=3, max_len=10)) for k, m in models.items()}
    torch.testing.assert_close(logits[True], logits[False], rtol=1e-5, atol=1e-5)
    assert [[h.tokens for h in s] for s in hyps[True]] == [[h.tokens for h in s] for s in hyps[False]]


@pytest.mark.parametrize("share", [True, False])
def test_quantized_model_keeps_no_float_vocabulary_matrix(share):
    config = ModelConfig.preset(
        "tiny",
        vocab_size=120,
        tgt_vocab_size=None if share else 90,
        share_embeddings=share,
        tie_output=share,
        final_logits_bias=True,
    )
    model = Transformer(config).eval()
    with torch.no_grad():
        model.logits_bias.normal_()
    src, tgt = torch.randint(4, 90, (3, 9)), torch.randint(4, 90, (3, 7))
    with torch.no_grad():
        reference = model(src, tgt)
        quantized = quantize_int8(model)
        logits = quantized(src, tgt)
    assert isinstance(model.encoder.embed, VocabularyEmbedding) and isinstance(model.decoder.embed, VocabularyEmbedding)
    assert (model.encoder.embed.vocabulary is model.decoder.embed.vocabulary) == share
    assert (model.output_proj.vocabulary is model.decoder.embed.vocabulary) == share
    tensors = itertools.chain(model.parameters(), model.buffers())
    assert not [t.shape for t in tensors if t.is_floating_point() and t.dim() == 2 and t.size(0) in (90, 120)]
    assert (logits - reference).abs().max() < 0.05 * reference.abs().max()  # the logits bias is still added
    assert logits.argmax(-1).eq(reference.argmax(-1)).float().mean() > 0.9


def test_int8_decoding_writes_the_logits_into_the_step_buffer():
    model = quantize_int8(Transformer(ModelConfig.preset("tiny", vocab_size=100)).eval())
    src = torch.randint(4, 100, (2, 6))
    step = CpuStep(model)
    with torch.inference_mode():
        log_probs, _ = step.step(torch.full((2, 1), model.config.bos_id), step.start(src))
        assert log_probs.data_ptr() == model.output_proj.logits.buffer.data_ptr()
        log_probs = log_probs.clone()  # the buffer is rewritten by the next product
        state = step.start(src)
        logits = model.decode_step(
            torch.full((2, 1), model.config.bos_id), state.memory_kv, state.src_mask, state.caches
        )
        # the same maths; int8's dynamic products may round the (N, D) rows of the lean step and the (N, 1, D) of
        # decode_step apart by a float32 ulp on some CPUs (AVX2)
        torch.testing.assert_close(log_probs, logits.log_softmax(-1), rtol=0, atol=1e-5)
        hyps = beam_search(step, src, DecodeConfig(beam_size=3, max_len=8))
    assert len(hyps) == 2 and all(h and h[0].tokens for h in hyps)


LOAD_AND_REPORT_PEAK = """
import sys
from pathlib import Path
import torch
from aiayn.config import ModelConfig
from aiayn.cpu.quantize import quantize_int8
from aiayn.cpu.memory import MappedReads
from aiayn.weights import load_model
from aiayn.model import Transformer

def resident(field):
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(field + ":"))
    return int(line.split()[1]) * 1024

torch.set_num_threads(1)
quantize_int8(Transformer(ModelConfig.preset("tiny", vocab_size=100)).eval())  # code loaded before we count
before = resident("VmRSS")
maps = MappedReads()
model = quantize_int8(load_model(sys.argv[1], read=maps.read), release=maps.release)
maps.detach(model)
print(resident("VmHWM") - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak from /proc (Linux)")
def test_int8_loading_never_holds_the_float_vocabulary(tmp_path):
    """The mapped vocabulary is quantised and given back a block at a time: loading peaks well below
    the float32 matrix it reads (before, it held all of it, plus the int8 copy). Packing it for oneDNN
    holds the plain int8 rows and their packed copy together for a moment: two quarters of it."""
    config = ModelConfig.preset("tiny", vocab_size=320_000)  # an 82 MB float32 matrix, 20 MB in int8
    save_model(Transformer(config).eval(), tmp_path / "model")
    done = subprocess.run(
        [sys.executable, "-c", LOAD_AND_REPORT_PEAK, str(tmp_path / "model")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    float_matrix = 320_000 * config.d_model * 4
    int8_copies = 2 if packed.available() else 1  # packed, or packed and found unreadable (AVX2)
    assert int(done.stdout.split()[-1]) < (0.25 * int8_copies + 0.25) * float_matrix
