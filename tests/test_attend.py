"""cpu/attend.py and the row table of decode/state.py: beams reordered without copying the caches decode exactly
as with the copies; the self-attention kernel is eq. (1) through the table, the encoder-decoder one eq. (1) over
each sentence's unpadded source."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import torch

from aiayn import ModelConfig, Transformer
from aiayn.config import DecodeConfig
from aiayn.cpu import attend
from aiayn.cpu.quantize import quantize_int8
from aiayn.cpu.step import CpuStep
from aiayn.decode.beam import beam_search
from aiayn.decode.greedy import greedy_hypotheses

pytestmark = pytest.mark.skipif(
    not shutil.which(os.environ.get("CC") or "cc"), reason="no C compiler: the caches are copied"
)


@pytest.mark.parametrize(
    "N, R, h, t, d_k, d_v", [(1, 1, 1, 1, 64, 64), (4, 4, 8, 20, 64, 64), (3, 7, 2, 9, 8, 24), (64, 64, 8, 33, 64, 64)]
)
def test_the_kernel_is_pytorchs_attention_over_the_rows_the_table_names(N, R, h, t, d_k, d_v):
    assert attend.kernel() is not None, attend.why_not()
    k, v = torch.randn(t + 3, R, h, d_k), torch.randn(t + 3, R, h, d_v)
    table = torch.randint(0, R, (t + 3, R))
    q = torch.randn(N, h, d_k)
    got = attend.attend(q, k, v, table, t)
    assert got.shape == (N, h * d_v)
    assert (got - attend.reference(q, k, v, table, t)).abs().max() < 1e-5
    # by hand for one row and head: the rows named by the table, not the row's own
    n, c = N - 1, h - 1
    keys, values = k[torch.arange(t), table[:t, n], c], v[torch.arange(t), table[:t, n], c]  # (t, d)
    weights = (keys @ q[n, c] / d_k**0.5).softmax(0)
    assert torch.allclose(got.view(N, h, d_v)[n, c], weights @ values, atol=1e-5)
    for wrong in (
        dict(table=table[:, :-1] if R > 1 else table[:-1]),
        dict(t=t + 4),
        dict(q=torch.randn(N, h, d_k + 1)),
    ):
        args = dict(q=q, k=k, v=v, table=table, t=t) | wrong
        with pytest.raises(ValueError, match="do not go together"):  # the kernel would read past the buffers
            attend.attend(**args)


@pytest.mark.parametrize("B, K, S", [(1, 1, 1), (1, 4, 20), (5, 3, 9), (32, 1, 41), (4, 4, 33)])
def test_the_source_kernel_is_pytorchs_attention_over_the_unpadded_positions(B, K, S):
    h, d_k, d_v = 8, 64, 48
    q, k, v = torch.randn(B * K, h, d_k), torch.randn(B, h, S, d_k), torch.randn(B, h, S, d_v)
    mask = (torch.arange(S) < torch.randint(1, S + 1, (B, 1)))[:, None, None, :]  # (B, 1, 1, S), each at least one
    v_padding = v.masked_fill(~mask.view(B, 1, S, 1), float("nan"))  # what padded positions hold must not matter
    got = attend.source(q, k, v_padding, mask)
    assert got.shape == (B * K, h * d_v)
    assert (got - attend.source_reference(q, k, v, mask)).abs().max() < 1e-5
    # the sentence's own keys for each of its K hypotheses: sentence b's rows are b * K .. b * K + K - 1
    b, i, c = B - 1, K - 1, 0
    length = int(mask[b].sum())
    weights = (k[b, c, :length] @ q[b * K + i, c] / d_k**0.5).softmax(0)
    assert torch.allclose(got.view(B * K, h, d_v)[b * K + i, c], weights @ v[b, c, :length], atol=1e-5)
    assert torch.equal(attend.source(q, k, v, None), attend.source(q, k, v, torch.ones(B, 1, 1, S, dtype=torch.bool)))
    with pytest.raises(ValueError, match="do not go together"):
        attend.source(q, k, v, mask[:, :, :, :-1])


def copy_and_table(model: Transformer) -> tuple[CpuStep, CpuStep]:
    """Two step models of one model: one copies the caches on reordering, one reads them through its row table."""
    copying, through_table = CpuStep(model), CpuStep(model)
    copying.uses_row_table = lambda memory: False
    assert through_table.uses_row_table(torch.empty(0)), attend.why_not()
    return copying, through_table


@pytest.mark.parametrize("int8", [False, True])
def test_reordering_through_the_table_gives_the_copies_log_probabilities(int8):
    """Random reorders (repeated rows, fewer rows, more rows than the buffers hold, sentences dropped) applied to
    both kinds of state; each step's rows are a multiple of its sentences, as a search's are."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=50)).eval()
    if int8:
        quantize_int8(model)
    copying, through_table = copy_and_table(model)
    src = torch.randint(4, 50, (3, 6))
    src[1, 3:] = model.config.pad_id  # a padded source: the encoder-decoder attention's mask matters
    generator = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        states = [copying.start(src, capacity=2), through_table.start(src, capacity=2)]  # the buffers grow twice
        assert states[0].caches[0].table is None and states[1].caches[0].table is not None
        rows, keep = 3, torch.tensor([2, 0])
        for t, (new_rows, sentences) in enumerate(
            [(6, None), (6, None), (3, None), (9, None), (9, None), (4, keep), (2, None)]
        ):
            tokens = torch.randint(4, 50, (rows, 1), generator=generator)
            out = [step.step(tokens, state) for step, state in zip((copying, through_table), states)]
            assert (out[0][0] - out[1][0]).abs().max() < 1e-5, f"step {t}"
            picked = torch.randint(0, rows, (new_rows,), generator=generator)
            states = [state.index_select(picked, sentences) for _, state in out]
            rows = new_rows
        assert states[1].rows == 2 and states[1].caches[0].k.size(1) == 9  # the buffers keep their rows: nothing copied


def test_searches_find_the_same_hypotheses_either_way():
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40)).eval()
    src = torch.randint(4, 40, (5, 7))
    src[2, 4:] = model.config.pad_id
    copying, through_table = copy_and_table(model)
    for search, config in (
        (beam_search, DecodeConfig(beam_size=4, max_len=12, n_best=2)),
        (greedy_hypotheses, DecodeConfig(beam_size=1, max_len=12)),
    ):
        a, b = search(copying, src, config), search(through_table, src, config)
        assert [[h.tokens for h in hs] for hs in a] == [[h.tokens for h in hs] for hs in b]
        assert all(abs(x.score - y.score) < 1e-5 for hs, gs in zip(a, b) for x, y in zip(hs, gs))


def test_the_model_reads_a_reordered_cache_through_the_table_too():
    """Outside layer_step (the model's own decode_step) the cache gathers its rows through the table."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40)).eval()
    copying, through_table = copy_and_table(model)
    src = torch.randint(4, 40, (2, 5))
    with torch.inference_mode():
        states = [step.start(src) for step in (copying, through_table)]
        for tokens, rows in (
            (torch.tensor([[1], [1]]), torch.tensor([1, 0, 1, 1])),
            (torch.tensor([[7], [8], [9], [6]]), torch.tensor([3, 2])),
        ):
            states = [
                step.step(tokens, state)[1].index_select(rows) for step, state in zip((copying, through_table), states)
            ]
        logits = [model.decode_step(torch.tensor([[5], [6]]), s.memory_kv, s.src_mask, s.caches) for s in states]
    assert (logits[0] - logits[1]).abs().max() < 1e-5


def test_other_attention_modules_or_no_kernel_keep_the_copies(monkeypatch):
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40)).eval()
    memory = torch.empty(0)

    class Scaled(type(model.decoder.layers[0].self_attn.attention)):
        pass

    model.decoder.layers[1].self_attn.attention = Scaled().eval()  # a module of the user's own: it runs as it is
    assert not CpuStep(model).uses_row_table(memory)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40)).eval()
    model.decoder.layers[0].cross_attn.attention.register_forward_hook(lambda *a: None)
    assert not CpuStep(model).uses_row_table(memory)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40)).eval()
    assert CpuStep(model).uses_row_table(memory)
    assert not CpuStep(model).uses_row_table(memory.double())  # float32 only
    monkeypatch.setattr(attend, "kernel", lambda: None)
    step = CpuStep(model)
    assert not step.uses_row_table(memory)
    with torch.inference_mode():
        assert step.start(torch.randint(4, 40, (2, 5))).caches[0].table is None


def test_without_a_compiler_the_caches_are_copied_and_it_says_why(tmp_path):
    code = """
import torch
from aiayn import ModelConfig, Transformer
from aiayn.cpu import attend
from aiayn.cpu.step import CpuStep
print(attend.why_not())
step = CpuStep(Transformer(ModelConfig.preset("tiny", vocab_size=40)).eval())
with torch.inference_mode():
    print(step.start(torch.randint(4, 40, (2, 5))).caches[0].table)
"""
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc"), "AIAYN_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    reason, table = done.stdout.strip().splitlines()
    assert "no C compiler" in reason and table == "None"


def test_a_step_must_bring_one_row_per_live_hypothesis():
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40)).eval()
    step = CpuStep(model)
    with torch.inference_mode():
        _, state = step.step(torch.ones(2, 1, dtype=torch.long), step.start(torch.randint(4, 40, (2, 5))))
        state = state.index_select(torch.tensor([1, 0, 0, 1]))  # widened to 4 rows
        _, state = step.step(torch.ones(4, 1, dtype=torch.long), state)
        state = state.index_select(torch.tensor([3, 0]))  # 2 live rows in buffers of 4
        with pytest.raises(ValueError, match="4 rows given to a decoding state of 2 hypotheses"):
            step.step(torch.ones(4, 1, dtype=torch.long), state)


def test_under_autocast_or_another_default_dtype_the_step_still_decodes():
    """Under CPU autocast the products give bfloat16: the kernels (float32 only) stand aside and the cache is read
    through its table. A default dtype set after the model was made does not reach the kernels' outputs."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40)).eval()
    copying, through_table = copy_and_table(model)
    src = torch.randint(4, 40, (2, 6))
    rows = torch.tensor([1, 0, 1, 1])
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = []
        for step in (copying, through_table):
            _, state = step.step(torch.ones(2, 1, dtype=torch.long), step.start(src))
            log_probs, _ = step.step(torch.full((4, 1), 7), state.index_select(rows))
            out.append(log_probs.float())
    assert torch.isfinite(out[1]).all() and (out[0] - out[1]).abs().max() < 0.05  # bfloat16's precision
    expected = beam_search(copying, src, DecodeConfig(beam_size=3, max_len=8))
    default = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        got = beam_search(through_table, src, DecodeConfig(beam_size=3, max_len=8))
    finally:
        torch.set_default_dtype(default)
    assert [[h.tokens for h in hs] for hs in got] == [[h.tokens for h in hs] for hs in expected]


def test_an_attention_module_swapped_in_after_a_start_runs():
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40)).eval()
    step, src = CpuStep(model), torch.randint(4, 40, (2, 5))
    calls = []

    class Counting(type(model.decoder.layers[0].cross_attn.attention)):
        def forward(self, *args, **kwargs):
            calls.append(1)
            return super().forward(*args, **kwargs)

    with torch.inference_mode():
        step.step(torch.ones(2, 1, dtype=torch.long), step.start(src))
        assert not calls
        model.decoder.layers[0].cross_attn.attention = Counting().eval()
        state = step.start(src)
        assert state.caches[0].table is None  # the copies and the model's modules, for this state
        step.step(torch.ones(2, 1, dtype=torch.long), state)
    assert calls
