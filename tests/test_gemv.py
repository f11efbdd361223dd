"""aiayn's own product for a step's few rows (cpu/gemv.py, issue 18): PyTorch's product to 1e-4, built once
into a private cache, and a clear reason, not an error, where it cannot be built."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn.cpu import backend, gemv

# Skipped only where there is no C compiler; with one, a build that fails or a product that disagrees fails here.
pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC") or "cc") is None, reason="no C compiler (cc, or $CC)")


def test_it_is_built_where_there_is_a_compiler():
    assert gemv.kernel() is not None, gemv.why_not()


@pytest.mark.parametrize("M", [1, 2, 3, 4])
@pytest.mark.parametrize("N, K", [(512, 512), (37, 50), (130, 2048), (58, 16), (5, 3)])
def test_the_product_is_pytorchs_with_and_without_a_bias(M, N, K):
    g = torch.Generator().manual_seed(M * 1000 + N + K)
    x, W, b = torch.randn(M, K, generator=g), torch.randn(N, K, generator=g), torch.randn(N, generator=g)
    torch.testing.assert_close(gemv.product(x, W, b), torch.addmm(b, x, W.t()), atol=1e-4, rtol=1e-4)
    out = torch.full((M, N), float("nan"))
    assert gemv.product(x, W, None, out) is out
    torch.testing.assert_close(out, x @ W.t(), atol=1e-4, rtol=1e-4)


def test_the_layer_takes_few_rows_and_leaves_the_rest_to_onednn(monkeypatch):
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48)
    layer = gemv.GemvLinear(linear)
    assert layer.weight is linear.weight and layer.bias is linear.bias  # no copy
    calls, kernel = [], gemv._multiply
    monkeypatch.setattr(gemv, "_multiply", lambda x, *a, **k: calls.append(tuple(x.shape)) or kernel(x, *a, **k))
    with torch.inference_mode():
        for shape in [(1, 64), (4, 64), (2, 1, 64), (5, 64), (3, 7, 64), (0, 64)]:
            x = torch.randn(shape)
            y = layer(x)
            assert y.shape == (*shape[:-1], 48)
            torch.testing.assert_close(y, linear(x), atol=1e-5, rtol=1e-5)
    assert calls == [(1, 64), (4, 64), (2, 64)]  # up to MAX_ROWS rows; more, or none, on oneDNN
    x = torch.randn(2, 64, requires_grad=True)
    calls.clear()
    y = layer(x)  # a gradient to track: oneDNN's product, which has a backward (the kernel has none)
    assert calls == [] and y.requires_grad
    unbiased = torch.nn.Linear(64, 48, bias=False)
    x = torch.randn(3, 64)
    with torch.inference_mode():
        torch.testing.assert_close(gemv.GemvLinear(unbiased)(x), unbiased(x), atol=1e-5, rtol=1e-5)
    assert calls[-1] == (3, 64)
    with (
        pytest.raises(RuntimeError),
        torch.inference_mode(),
    ):  # a width that is not the layer's: an error, not a read past W
        layer(torch.randn(2, 128))


def test_the_projection_writes_a_steps_logits_into_one_buffer():
    from aiayn.model import OutputProjection

    torch.manual_seed(0)
    plain = OutputProjection(32, 300)
    projection, embedding = gemv.GemvProjection(plain), plain.weight.detach()
    bias = torch.randn(300)
    with torch.inference_mode():
        first = projection(torch.randn(4, 32), bias)
        address = first.data_ptr()
        h = torch.randn(2, 32)
        second = projection(h, bias)
        assert second.data_ptr() == address  # the same buffer, rewritten
        torch.testing.assert_close(second, h @ embedding.t() + bias, atol=1e-4, rtol=1e-4)
        many = torch.randn(9, 32)  # more rows than the kernel takes: oneDNN, a tensor of its own
        torch.testing.assert_close(projection(many), many @ embedding.t(), atol=1e-4, rtol=1e-4)


def test_the_measure_offers_it_at_few_rows_and_pick_takes_it_where_faster():
    from aiayn import ModelConfig

    config = ModelConfig.preset("tiny", vocab_size=300)
    assert "onednn+gemv" in backend.measure(config, rows=4, repeats=1)
    assert "onednn+gemv" not in backend.measure(config, rows=8, repeats=1)
    seconds = {"mkl": 3.0, "onednn": 2.0, "mkl+packed": 2.5, "onednn+packed": 1.5}
    assert backend.pick({**seconds, "onednn+gemv": 1.0}, logits_bytes=1024) == "onednn+gemv"
    assert backend.pick({**seconds, "onednn+gemv": 1.6}, logits_bytes=1024) == "onednn+packed"


def run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )


@pytest.mark.parametrize("V", [1, 7, 129, 1000, 58101])
def test_greedys_pick_is_torch_max_first_among_equals_and_nan_the_largest(V):
    """The C pick returns what x.max(dim=1) returns, for rows with equal maxima, NaNs, infinities and every piece
    banned; greedy search takes it through the CPU's step model (a topk gives equals in an order of its own)."""
    generator = torch.Generator().manual_seed(V)
    x = torch.randn(6, V, generator=generator)
    x[1, torch.randint(0, V, (3,), generator=generator)] = 9.0  # equals
    x[2] = float("-inf")  # every piece banned
    x[3, torch.randint(0, V, (2,), generator=generator)] = float("nan")
    x[4, -1] = float("inf")
    x[5] = 0.0  # all equal
    best, column = gemv.argmax(x)
    values, indices = x.max(dim=1)
    assert best.shape == column.shape == (6, 1) and column.dtype == torch.long
    assert torch.equal(column[:, 0], indices) and torch.allclose(best[:, 0], values, equal_nan=True)
    from aiayn.cpu.step import CpuStep

    assert torch.equal(CpuStep.argmax(x)[1], column)  # the pick greedy search takes from the CPU's step model
    assert gemv.argmax(x.double()) is None and (
        V == 1 or gemv.argmax(x[:, ::2]) is None
    )  # not contiguous float32: topk's
    assert gemv.argmax(x[:, :0]) is None and gemv.argmax(x.clone().requires_grad_()) is None


def test_what_the_c_writes_is_float32_whatever_torchs_default_dtype():
    """A process may change torch's default dtype (tests/test_attend.py decodes under float64). The kernels write
    float32, so every buffer they write is made float32, and their checks at load run in float32."""
    from aiayn.cpu.projection import LogitsBuffer

    generator = torch.Generator().manual_seed(0)
    x, W = torch.randn(3, 1000, generator=generator), torch.randn(50, 1000, generator=generator)
    layer = torch.nn.Linear(1000, 50)
    fast = gemv.GemvLinear(layer)
    torch.set_default_dtype(torch.float64)
    try:
        gemv._load.cache_clear(), gemv._load_argmax.cache_clear()  # the checks run again, under float64
        best, column = gemv.argmax(x)
        product, out = gemv.product(x[:2], W), fast(x[:2])
        logits = LogitsBuffer().rows(2, 10, torch.device("cpu"))
    finally:
        torch.set_default_dtype(torch.float32)
    values, indices = x.max(dim=1)
    assert best.dtype == torch.float32 and torch.equal(best[:, 0], values) and torch.equal(column[:, 0], indices)
    assert product.dtype == out.dtype == logits.dtype == torch.float32
    assert torch.allclose(product, x[:2] @ W.t(), atol=1e-4) and torch.allclose(out, layer(x[:2]), atol=1e-4)


def test_greedy_search_with_the_c_pick_gives_topks_hypotheses(monkeypatch):
    """On a model's real log-probabilities (no exact ties) the pick changes nothing: greedy's hypotheses and their
    log-probabilities are the same with it and with topk."""
    from aiayn import ModelConfig, Transformer
    from aiayn.cpu.step import CpuStep
    from aiayn.decode.greedy import greedy_hypotheses

    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=300)).eval()
    src = torch.randint(3, 300, (5, 9))
    with_c = greedy_hypotheses(CpuStep(model), src)
    calls = []
    monkeypatch.setattr(gemv, "argmax", lambda x: calls.append(1))  # None: topk
    with_topk = greedy_hypotheses(CpuStep(model), src)
    assert calls and [[(h.tokens, h.log_prob) for h in hs] for hs in with_c] == [
        [(h.tokens, h.log_prob) for h in hs] for hs in with_topk
    ]


def test_it_is_built_once_into_a_private_folder(tmp_path):
    code = "from aiayn.cpu import gemv; assert gemv.kernel() is not None, gemv.why_not(); print(gemv.cache_folder())"
    first = run(code, {"AIAYN_CACHE": str(tmp_path / "cache")})
    assert first.returncode == 0, first.stderr
    folder = Path(first.stdout.strip())
    assert folder == tmp_path / "cache" / "kernels" and stat.S_IMODE(folder.stat().st_mode) == 0o700
    [library] = folder.iterdir()  # the library alone: no temporary file left
    built = library.stat().st_mtime_ns
    assert run(code, {"AIAYN_CACHE": str(tmp_path / "cache")}).returncode == 0
    assert [p.name for p in folder.iterdir()] == [library.name] and library.stat().st_mtime_ns == built  # reused


def test_without_a_compiler_or_a_private_folder_it_says_why_and_decoding_goes_on(tmp_path):
    code = """
from aiayn import ModelConfig
from aiayn.cpu import backend, gemv
assert gemv.kernel() is None
import torch
from aiayn.decode import greedy
assert gemv.argmax(torch.zeros(1, 5)) is None and greedy.argmax(torch.tensor([[0.0, 2.0, 1.0]]))[1].item() == 1  # topk's
print(gemv.why_not())
assert "onednn+gemv" not in backend.measure(ModelConfig.preset("tiny", vocab_size=300), rows=1, repeats=1)
try:
    backend.forced("onednn+gemv")
except ValueError as e:
    print(e)
"""
    done = run(code, {"CC": str(tmp_path / "no-such-cc"), "AIAYN_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    reason, error = done.stdout.strip().splitlines()
    assert "no C compiler" in reason and "set CC" in reason
    assert error.startswith("GEMM backend onednn+gemv: aiayn's product is not available here: no C compiler")
    shared = tmp_path / "shared"
    (shared / "kernels").mkdir(parents=True)
    (shared / "kernels").chmod(0o777)  # anyone could put a library there: nothing is loaded from it
    done = run(code, {"AIAYN_CACHE": str(shared)})
    assert done.returncode == 0, done.stderr
    assert "is not this user's alone" in done.stdout and not list((shared / "kernels").iterdir())


def test_it_is_linked_to_pytorchs_openmp_where_other_wheels_load_their_own():
    """SentencePiece's wheel ships a libgomp of its own; a kernel linked to it would start a second thread pool."""
    code = """
import os, torch, sentencepiece
from aiayn.cpu import gemv
loaded = {line.split()[-1] for line in open("/proc/self/maps") if "libgomp" in line}
chosen = gemv._libgomp()
torch_folder = os.path.dirname(os.path.realpath(torch.__file__))
print(len(loaded), chosen is None or os.path.realpath(chosen).startswith((torch_folder + "/", torch_folder + ".libs/")))
"""
    done = run(code, {})
    assert done.returncode == 0, done.stderr
    count, torchs = done.stdout.split()
    assert torchs == "True", f"{count} libgomp loaded; the kernel would not run on PyTorch's"
