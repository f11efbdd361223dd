"""int8 translation weights (aiayn.decode.quantize): exact integer arithmetic, one int8 vocabulary."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn.config import DecodeConfig, ModelConfig
from aiayn.decode.beam import beam_search
from aiayn.decode.quantize import Int8Embedding, Int8Vocabulary, quantize_int8
from aiayn.decode.step import TransformerStep
from aiayn.io import save_model
from aiayn.model import Transformer


def test_vocabulary_rows_are_the_float_rows_to_half_a_step():
    weight = torch.randn(300, 48)
    weight[7] = 0.0  # a zero row (padding) stays zero
    vocab = Int8Vocabulary(weight, rows_at_once=64)  # several blocks
    step = weight.abs().amax(dim=1, keepdim=True) / 127  # (V, 1) one int8 step of each row
    ids = torch.tensor([[0, 7, 299], [5, 5, 64]])
    assert vocab.weight.dtype == torch.int8 and vocab.weight.abs().max() == 127
    assert vocab.rows(ids).shape == (2, 3, 48)
    assert ((vocab.rows(ids) - weight[ids]).abs() <= step[ids] / 2 + 1e-7).all()
    assert torch.equal(vocab.rows(torch.tensor(7)), torch.zeros(48))


def test_vocabulary_product_is_int8_times_int8_then_the_two_scales():
    weight, x = torch.randn(300, 48), torch.randn(5, 48)
    vocab = Int8Vocabulary(weight)
    x_scale = x.abs().max() / 127
    x_int8 = torch.round(x / x_scale)  # what the product multiplies, as floats
    w_int8 = torch.round(weight / vocab.scale[:, None])
    expected = (x_int8 @ w_int8.t()) * (vocab.scale * x_scale)  # integer sums below 2^24: exact in float32
    out = torch.full((5, 300), float("nan"))
    got = vocab.product(x, out=out)
    assert got.data_ptr() == out.data_ptr()  # written into the caller's buffer
    assert torch.equal(got, expected)
    assert torch.equal(vocab.product(x), expected)
    assert (expected - x @ weight.t()).abs().max() < 0.05 * (x @ weight.t()).abs().max()


@pytest.mark.parametrize("share", [True, False])
def test_quantized_model_keeps_no_float_vocabulary_matrix(share):
    config = ModelConfig.preset("tiny", vocab_size=120, tgt_vocab_size=None if share else 90,
                                share_embeddings=share, tie_output=share, final_logits_bias=True)
    model = Transformer(config).eval()
    with torch.no_grad():
        model.logits_bias.normal_()
    src, tgt = torch.randint(4, 90, (3, 9)), torch.randint(4, 90, (3, 7))
    with torch.no_grad():
        reference = model(src, tgt)
        quantized = quantize_int8(model)
        logits = quantized(src, tgt)
    assert isinstance(model.encoder.embed, Int8Embedding) and isinstance(model.decoder.embed, Int8Embedding)
    assert (model.encoder.embed.vocabulary is model.decoder.embed.vocabulary) == share
    assert (model.output_proj.vocabulary is model.decoder.embed.vocabulary) == share
    tensors = itertools.chain(model.parameters(), model.buffers())
    assert not [t.shape for t in tensors if t.is_floating_point() and t.dim() == 2 and t.size(0) in (90, 120)]
    assert (logits - reference).abs().max() < 0.05 * reference.abs().max()  # the logits bias is still added
    assert logits.argmax(-1).eq(reference.argmax(-1)).float().mean() > 0.9


def test_int8_decoding_writes_the_logits_into_the_step_buffer():
    model = quantize_int8(Transformer(ModelConfig.preset("tiny", vocab_size=100)).eval())
    src = torch.randint(4, 100, (2, 6))
    step = TransformerStep(model)
    with torch.inference_mode():
        log_probs, _ = step.step(torch.full((2, 1), model.config.bos_id), step.start(src))
        assert log_probs.data_ptr() == model.output_proj.logits.buffer.data_ptr()
        log_probs = log_probs.clone()  # the buffer is rewritten by the next product
        state = step.start(src)
        logits = model.decode_step(torch.full((2, 1), model.config.bos_id), state.memory_kv, state.src_mask, state.caches)
        assert torch.equal(log_probs, logits.log_softmax(-1))
        hyps = beam_search(step, src, DecodeConfig(beam_size=3, max_len=8))
    assert len(hyps) == 2 and all(h and h[0].tokens for h in hyps)


LOAD_AND_REPORT_PEAK = """
import sys
from pathlib import Path
import torch
from aiayn.config import ModelConfig
from aiayn.decode.quantize import quantize_int8
from aiayn.io import MappedReads, load_model
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
    the float32 matrix it reads (before, it held all of it, plus the int8 copy)."""
    config = ModelConfig.preset("tiny", vocab_size=320_000)  # an 82 MB float32 matrix, 20 MB in int8
    save_model(Transformer(config).eval(), tmp_path / "model")
    done = subprocess.run([sys.executable, "-c", LOAD_AND_REPORT_PEAK, str(tmp_path / "model")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    float_matrix = 320_000 * config.d_model * 4
    assert int(done.stdout.split()[-1]) < 0.5 * float_matrix
