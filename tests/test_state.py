"""The decoding state's ownership rules, and the per-stack and per-head sizes of the configuration."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from aiayn import ModelConfig, Transformer
from aiayn.config import DecodeConfig
from aiayn.cpu.step import CpuStep
from aiayn.decode.beam import beam_search
from aiayn.decode.state import UsedState


def test_a_used_up_state_raises_instead_of_reading_garbage():
    model = Transformer(ModelConfig.preset("tiny", vocab_size=30)).eval()
    step = CpuStep(model)
    src = torch.randint(4, 30, (3, 7))
    with torch.inference_mode():
        first = step.start(src)
        _, second = step.step(torch.full((3, 1), model.config.bos_id), first)
        with pytest.raises(UsedState):
            step.step(torch.full((3, 1), 5), first)  # its caches now belong to `second`
        third = second.index_select(torch.tensor([2, 0]), torch.tensor([2, 0]))
        with pytest.raises(UsedState):
            second.index_select(torch.tensor([0]), torch.tensor([0]))
        with pytest.raises(UsedState):
            step.step(torch.full((3, 1), 5), second)
        log_probs, fourth = step.step(torch.full((2, 1), 5), third)  # the returned state goes on
    assert log_probs.shape == (2, 30) and fourth.length == 2 and fourth.rows == 2


@pytest.mark.parametrize(
    "sizes",
    [
        dict(d_k=8, d_v=24),  # Table 3 row (B) shrinks d_k; d_v may differ from it
        dict(n_heads=2, n_decoder_heads=8, d_decoder_ff=96, n_decoder_layers=3),  # a Marian configuration may
    ],
)
def test_other_head_and_stack_sizes_decode_as_they_are_trained(sizes):
    config = ModelConfig.preset("tiny", vocab_size=40, **sizes)
    model = Transformer(config).eval()
    enc, dec = config.encoder, config.decoder
    attn, ffn = model.decoder.layers[0].self_attn, model.decoder.layers[0].ffn
    assert attn.q_proj.weight.shape == (dec.heads * dec.d_k, config.d_model)
    assert attn.v_proj.weight.shape == (dec.heads * dec.d_v, config.d_model)
    assert attn.out_proj.weight.shape == (config.d_model, dec.heads * dec.d_v)
    assert ffn.fc1.weight.shape == (dec.d_ff, config.d_model) and len(model.decoder.layers) == dec.layers
    assert model.encoder.layers[0].self_attn.heads == enc.heads
    src, tgt = torch.randint(4, 40, (2, 6)), torch.randint(4, 40, (2, 5))
    with torch.inference_mode():
        out = model(src, tgt, return_attention=True)
        assert out.attention.decoder[0].shape == (2, dec.heads, 5, 5)
        step = CpuStep(model)
        state, steps = step.start(src), []
        for t in range(tgt.size(1)):
            log_probs, state = step.step(tgt[:, t : t + 1], state)
            steps.append(log_probs.clone())
    assert (torch.stack(steps, 1) - out.logits.log_softmax(-1)).abs().max() < 1e-5
    hyps = beam_search(model, src, DecodeConfig(beam_size=3, max_len=6))
    assert all(len(h) == 1 and len(h[0].tokens) <= 6 for h in hyps)


def test_stack_shapes_follow_the_paper_unless_set():
    base = ModelConfig.preset("base")
    assert base.encoder == base.decoder == (6, 8, 64, 64, 2048)  # d_k = d_v = d_model / h (§3.2.2)
    assert ModelConfig.preset("base", n_heads=16).encoder.d_k == 32  # Table 3 row (A)
    assert ModelConfig.preset("base", n_heads=16, d_k=16).encoder[1:4] == (16, 16, 32)  # row (B): d_v stays 512/16
    with pytest.raises(ValueError, match="n_decoder_heads 7"):
        ModelConfig.preset("base", n_decoder_heads=7)


HEAP_SETUP = r"""
import torch
from aiayn import ModelConfig, Transformer
from aiayn.cpu.step import CpuStep

def resident():  # MiB, now
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

step = CpuStep(Transformer(ModelConfig.preset("tiny", vocab_size=30)).eval())
src = torch.randint(4, 30, (2, 5))
torch.inference_mode().__enter__()
step.start(src)  # warm-up: the code and the model's pages are in
torch.empty(16 << 20, dtype=torch.uint8).fill_(1)  # freed: glibc's mmap threshold rises to 16 MiB
"""

HEAP_AFTER_A_BATCH = (
    HEAP_SETUP
    + r"""
blocks = [torch.empty(1 << 20, dtype=torch.uint8).fill_(1) for _ in range(128)]  # a batch's buffers, in the heap
del blocks[::2]  # 64 MiB freed between blocks still held: holes in the heap's middle, which glibc keeps
held = resident()
step.start(src)
print(held - resident())
"""
)

HEAP_AFTER_THE_ENCODER = (
    HEAP_SETUP
    + r"""
kept, encode = [], step.encode_by_length

def encode_with_holes(src):  # activations freed between buffers that live on through the batch
    blocks = [torch.empty(1 << 20, dtype=torch.uint8).fill_(1) for _ in range(128)]
    kept.extend(blocks[1::2])
    return encode(src)

before = resident()
step.encode_by_length = encode_with_holes
step.start(src)
print(resident() - before)  # 64 MiB kept; another 64 if the freed holes stayed
"""
)


def resident_change(script: str) -> float:
    """The last number a heap script prints (MiB), run in a fresh process; skipped where there is no malloc_trim."""
    from aiayn.cpu.memory import _malloc_trim

    if _malloc_trim is None:
        pytest.skip("not glibc: no malloc_trim")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap and /proc/self/status")
def test_start_gives_back_what_the_encoder_freed():
    """The encoder's freed activations are not held through the batch: start() trims after it too."""
    assert resident_change(HEAP_AFTER_THE_ENCODER) < 64 + 16  # MiB still resident: the kept half, not the freed one


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap and /proc/self/status")
def test_start_gives_back_the_heap_pages_the_last_batch_freed():
    """64 MiB freed in the middle of the C heap stay resident under glibc until start() trims it."""
    assert resident_change(HEAP_AFTER_A_BATCH) > 48  # MiB given back of the 64
