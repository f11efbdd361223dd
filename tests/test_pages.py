"""Decoding's weights on huge pages (cpu/pages.py, issue 18): the same outputs bit for bit, the same layout,
parameters moved into one mapping on 2 MiB pages, the vocabulary collapsed where it is, no second copy left."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from aiayn import ModelConfig, Transformer
from aiayn.cpu import pages
from aiayn.cpu.layout import column_major, for_decoding
from aiayn.data.sources import read_lines
from aiayn.translator import Translator
from aiayn.weights import save_model

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
needs_huge_pages = pytest.mark.skipif(pages.why_not() is not None, reason=f"no huge pages here: {pages.why_not()}")


def model(vocab: int = 33_000, d_model: int = 64, d_ff: int = 1024, decoding: bool = True) -> Transformer:
    """A small model whose vocabulary (V x 64 floats, 8.1 MiB) is collapsed in place and whose FFN matrices (256 KiB)
    are moved; made ready for decoding (MKL's layout: column-major) unless not decoding."""
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", vocab_size=vocab, d_model=d_model, d_ff=d_ff, max_len=64)
    return for_decoding(Transformer(config)) if decoding else Transformer(config).eval()


def logits(m: Transformer) -> torch.Tensor:
    src = torch.randint(4, 200, (3, 11), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(4, 200, (3, 7), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        return m(src, tgt)


def huge_kib(address: int) -> int:
    """AnonHugePages of the mapping of this process that holds address, in KiB."""
    inside, total = False, 0
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if head:
            inside = int(head[1], 16) <= address < int(head[2], 16)
        elif inside and line.startswith("AnonHugePages:"):
            total += int(line.split()[1])
    return total


def status_kib(field: str) -> int:
    return next(
        int(line.split()[1])
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith(field + ":")
    )


@needs_huge_pages
def test_same_outputs_bit_for_bit_and_the_parameters_on_huge_pages():
    m = model()
    before = logits(m)
    values = {name: p.detach().clone() for name, p in m.named_parameters()}
    strides = {name: p.stride() for name, p in m.named_parameters()}
    vocabulary = m.output_proj.matrix
    where = vocabulary.data_ptr()
    done = pages.on_huge_pages(m)
    assert torch.equal(logits(m), before)  # the same model, to the bit
    assert all(torch.equal(p, values[name]) and p.stride() == strides[name] for name, p in m.named_parameters())
    assert m.output_proj.matrix is vocabulary and vocabulary.data_ptr() == where  # collapsed where it is, still tied
    assert m.encoder.embed.weight is m.decoder.embed.weight is vocabulary
    moved = [p for p in m.parameters() if pages.SMALLEST <= p.numel() * p.element_size() < pages.IN_PLACE_BYTES]
    assert moved and done.moved == sum(p.numel() * p.element_size() for p in moved)
    first = min(p.data_ptr() for p in moved)
    assert first % pages.pmd_size() == 0  # one mapping, starting on a huge page
    assert len({p.untyped_storage().data_ptr() for p in moved}) == 1
    assert huge_kib(first) >= done.moved // 1024 // 2  # most of it on 2 MiB pages (the last page may stay small)
    if (
        done.collapsed
    ):  # MADV_COLLAPSE (Linux 6.1 and later): the 2 MiB blocks inside the matrix, a mapping of their own
        assert huge_kib(-(-where // pages.pmd_size()) * pages.pmd_size()) >= 2048
    assert done.moved // 2 <= done.resident <= done.moved + done.collapsed  # the weights' own memory, not the process's
    assert str(done) == f"{done.resident / 2**20:,.0f} MiB on huge pages"
    again = pages.on_huge_pages(m)  # a second call: what the first moved stays, nothing is counted twice
    assert (again.moved, [p.data_ptr() for p in moved]) == (0, [p.data_ptr() for p in moved])
    assert again.collapsed <= done.collapsed and torch.equal(logits(m), before)


@needs_huge_pages
def test_the_mapping_goes_with_the_last_parameter_on_it():
    """Once the model is gone its mapping is unmapped, and no longer known as one already moved (a later tensor at
    the same address is treated as any other)."""
    import gc

    gc.collect()  # the models of earlier tests that nothing holds any more go first, not in the count below
    m = model()
    assert pages.on_huge_pages(m).moved > 0
    known = len(pages._AREAS)
    del m
    gc.collect()
    assert len(pages._AREAS) == known - 1


@needs_huge_pages
def test_inference_tensors_stay_inference_tensors_and_the_rest_stay_as_they_were():
    """A model made under inference_mode keeps inference tensors (and one made outside it normal ones), whichever
    mode the call is made in: a parameter changed from one to the other fails at its next use."""
    with torch.inference_mode():
        made_inside = model()
    before = logits(made_inside)
    pages.on_huge_pages(made_inside)
    assert all(p.is_inference() for p in made_inside.parameters())
    assert torch.equal(logits(made_inside), before)
    made_outside = model()
    before = logits(made_outside)
    with torch.inference_mode():
        done = pages.on_huge_pages(made_outside)
    assert done.moved > 0 and not any(p.is_inference() for p in made_outside.parameters())
    assert torch.equal(logits(made_outside), before)


@needs_huge_pages
def test_column_major_matrices_keep_their_layout():
    m = model()
    for layer in m.decoder.layers:
        layer.ffn.fc1.weight = nn.Parameter(column_major(layer.ffn.fc1.weight.detach()), requires_grad=False)
    before = logits(m)
    pages.on_huge_pages(m)
    assert all(layer.ffn.fc1.weight.t().is_contiguous() for layer in m.decoder.layers)
    assert torch.equal(logits(m), before)


@needs_huge_pages
def test_views_and_shared_storage_stay_where_they_are():
    m = model()
    big = torch.randn(128, 1024)
    m.decoder.layers[0].ffn.fc1.weight = nn.Parameter(
        big[:, :64].t(), requires_grad=False
    )  # a view (64 of 1024 columns)
    shared = m.decoder.layers[1].ffn.fc2.weight
    m.kept = shared.detach()  # a second tensor on the same memory: moving the parameter would leave it a copy
    views = m.decoder.layers[0].ffn.fc1.weight.data_ptr(), shared.data_ptr()
    held = m.decoder.layers[1].ffn.fc1.weight.detach()  # held by the caller, outside the model: PyTorch's use count
    pages.on_huge_pages(m)
    assert (m.decoder.layers[0].ffn.fc1.weight.data_ptr(), shared.data_ptr()) == views
    assert m.kept.data_ptr() == shared.data_ptr()
    if hasattr(torch._C, "_storage_Use_Count"):
        assert m.decoder.layers[1].ffn.fc1.weight.data_ptr() == held.data_ptr()


def test_a_failure_leaves_the_model_as_it_was_and_says_why(monkeypatch):
    """No memory for the new mapping (ulimit -v, strict overcommit): Translator.load must not fail for a speed measure."""

    def no_memory(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(pages.mmap, "mmap", no_memory)
    monkeypatch.setattr(pages, "why_not", lambda: None)  # as on a host with huge pages
    m = model()
    before, where = logits(m), [p.data_ptr() for p in m.parameters()]
    done = pages.on_huge_pages(m)
    assert done.moved == 0 and "Cannot allocate memory" in done.why_not
    assert [p.data_ptr() for p in m.parameters()] == where and torch.equal(logits(m), before)


@needs_huge_pages
def test_views_of_a_mapped_file_stay_where_they_are(tmp_path):
    """Tensors still in `io.MappedReads`' map of the weight file (before `detach`) are the file's pages: left alone."""
    from aiayn.cpu.memory import MappedReads
    from aiayn.weights import load_model

    directory = save_model(model(decoding=False), tmp_path)
    maps = MappedReads()
    m = load_model(directory, read=maps.read)
    mapped = [p for p in m.parameters() if maps.holds(p)]
    assert mapped and any(p.numel() * 4 >= pages.IN_PLACE_BYTES for p in mapped)
    where = [p.data_ptr() for p in mapped]
    done = pages.on_huge_pages(m)
    assert [p.data_ptr() for p in mapped] == where and (done.moved, done.collapsed) == (0, 0)
    maps.detach(m)
    assert pages.on_huge_pages(m).moved > 0  # once copied out of the file, they go


@needs_huge_pages
def test_no_second_copy_is_left_in_memory():
    """The parameters' old memory is given back as they are copied: the resident memory, and its peak, end no higher
    than a few MiB above where they started (the peak is reset first: /proc/self/clear_refs)."""
    m = model(vocab=1000, d_model=256, d_ff=4096)  # 2 x 2 x 4 MiB of FFN matrices and more: 39 MiB to move
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    except OSError:
        pytest.skip("the peak resident memory cannot be reset here")
    start = status_kib("VmRSS")
    done = pages.on_huge_pages(m)
    assert done.moved > 32 << 20
    assert status_kib("VmRSS") - start < 8 << 10
    assert status_kib("VmHWM") - start < 12 << 10


def test_nothing_is_done_when_switched_off(monkeypatch):
    monkeypatch.setenv("AIAYN_HUGE_PAGES", "0")
    m = model()
    where = [p.data_ptr() for p in m.parameters()]
    done = pages.on_huge_pages(m)
    assert (done.moved, done.collapsed) == (0, 0) and done.why_not == "AIAYN_HUGE_PAGES=0"
    assert [p.data_ptr() for p in m.parameters()] == where
    assert str(done) == "no huge pages (AIAYN_HUGE_PAGES=0)"


def test_translator_load_puts_weights_on_huge_pages_and_translates_the_same(tmp_path, monkeypatch):
    """Translator.load does it last, on a CPU; the translations are the same with it and without it."""
    from aiayn.data.vocab import Vocab

    lines = read_lines(DATA / "val.en.gz")[:300] + read_lines(DATA / "val.de.gz")[:300]
    vocab = Vocab.train(lines, 300)
    torch.manual_seed(0)
    directory = save_model(
        Transformer(ModelConfig.preset("tiny", vocab_size=len(vocab), d_ff=1024, max_len=96)), tmp_path, vocab.proto
    )
    sentences = read_lines(DATA / "test_2016_flickr.en.gz")[:12]
    gemms = ["onednn", "mkl"] + (["onednn+gemv"] if shutil.which("cc") else [])
    for gemm in gemms:
        on = Translator.load(directory, gemm=gemm, beam_size=2)
        monkeypatch.setenv("AIAYN_HUGE_PAGES", "0")
        off = Translator.load(directory, gemm=gemm, beam_size=2)
        monkeypatch.delenv("AIAYN_HUGE_PAGES")
        assert off.huge_pages.why_not == "AIAYN_HUGE_PAGES=0"
        if pages.why_not() is None:
            assert on.huge_pages.moved > 0, gemm  # the FFN matrices (256 KiB each)
        assert on.translate(sentences) == off.translate(sentences), gemm
