"""Weights read and laid out for decoding: aiayn.weights.read_safetensors and aiayn.cpu.layout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from aiayn import cpu
from aiayn.config import DecodeConfig, ModelConfig
from aiayn.cpu.layout import for_decoding, is_column_major
from aiayn.cpu.memory import MappedReads
from aiayn.decode.beam import beam_search
from aiayn.model import Transformer
from aiayn.weights import load_model, read_column_major, read_safetensors, save_model


def sample_tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "matrix": torch.randn(37, 11, generator=g),
        "vector": torch.randn(5, generator=g),
        "half": torch.randn(3, 4, generator=g).half(),
        "ints": torch.arange(6).view(2, 3),
        "cube": torch.randn(2, 3, 4, generator=g),
        "empty": torch.empty(0, 4),
    }


@pytest.mark.parametrize("column_major", [False, True])
def test_read_safetensors_equals_what_was_saved(tmp_path, column_major):
    tensors = sample_tensors()
    save_file(tensors, tmp_path / "w.safetensors")
    # 64-byte chunks: a 37 x 11 float matrix is written in 37 pieces of one row each
    read = read_safetensors(tmp_path / "w.safetensors", column_major=column_major, chunk_bytes=64)
    assert sorted(read) == sorted(tensors)
    for name, tensor in tensors.items():
        assert read[name].dtype == tensor.dtype and read[name].shape == tensor.shape
        assert torch.equal(read[name], tensor), name
        if tensor.dim() == 2 and tensor.numel():
            assert is_column_major(read[name]) == column_major and read[name].is_contiguous() != column_major


def test_read_safetensors_errors_name_the_file_and_tensor(tmp_path):
    save_file({"a": torch.zeros(4), "b": torch.ones(100, 3)}, tmp_path / "w.safetensors")
    data = (tmp_path / "w.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[:-10])
    with pytest.raises(ValueError, match=r"cut\.safetensors: b: the file ends before this tensor"):
        read_safetensors(tmp_path / "cut.safetensors", column_major=True)
    (tmp_path / "junk.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{junk")
    with pytest.raises(ValueError, match=r"junk\.safetensors: not a safetensors file"):
        read_safetensors(tmp_path / "junk.safetensors")
    (tmp_path / "odd.safetensors").write_bytes(b'\x0d\x00\x00\x00\x00\x00\x00\x00{"a": [1, 2]}')
    with pytest.raises(ValueError, match=r"odd\.safetensors: not a safetensors file \(entry 'a'"):
        read_safetensors(tmp_path / "odd.safetensors")


def test_mapped_reads_give_the_same_tensors_and_lose_nothing_on_release(tmp_path):
    tensors = sample_tensors()
    save_file(tensors, tmp_path / "w.safetensors")
    maps = MappedReads()
    mapped = maps.read(tmp_path / "w.safetensors")
    assert sorted(mapped) == sorted(tensors)
    for name, tensor in tensors.items():
        assert mapped[name].dtype == tensor.dtype and torch.equal(mapped[name], tensor), name
    assert maps.holds(mapped["matrix"]) and not maps.holds(tensors["matrix"])
    maps.release()  # pages given back are read again from the file
    assert torch.equal(mapped["matrix"], tensors["matrix"])
    model = torch.nn.Linear(11, 37)
    model.weight = torch.nn.Parameter(mapped["matrix"], requires_grad=False)
    maps.detach(model)
    assert not maps.holds(model.weight) and torch.equal(model.weight, tensors["matrix"])
    assert not maps.maps
    assert not maps.holds(read_safetensors(tmp_path / "w.safetensors")["matrix"])  # the plain reader reads
    (tmp_path / "cut.safetensors").write_bytes((tmp_path / "w.safetensors").read_bytes()[:-10])
    with pytest.raises(ValueError, match=r"cut\.safetensors: \w+: the file ends before this tensor"):
        MappedReads().read(tmp_path / "cut.safetensors")


def test_writing_into_a_mapped_tensor_neither_crashes_nor_changes_the_file(tmp_path):
    """The maps are private: a write lands in the process's own copy of the page."""
    save_file(sample_tensors(), tmp_path / "w.safetensors")
    before = (tmp_path / "w.safetensors").read_bytes()
    mapped = MappedReads().read(tmp_path / "w.safetensors")
    mapped["matrix"].add_(1.0)
    assert (tmp_path / "w.safetensors").read_bytes() == before


def test_a_shared_embedding_comes_back_as_one_tensor(tmp_path):
    """safetensors saves a tied tensor once; reading gives every name the same tensor again."""
    model = Transformer(ModelConfig.preset("tiny", vocab_size=50))
    save_model(model, tmp_path)
    read = read_safetensors(tmp_path / "model.safetensors", column_major=True)
    assert read["encoder.embed.weight"] is read["decoder.embed.weight"]
    loaded = load_model(tmp_path, read=read_column_major)
    assert loaded.encoder.embed is loaded.decoder.embed and is_column_major(loaded.decoder.embed.weight)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_for_decoding_changes_strides_not_results():
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", vocab_size=60, final_logits_bias=True)  # an all-zero bias, as Marian's
    model = Transformer(config).eval()
    src, tgt = torch.randint(4, 60, (3, 9)), torch.randint(4, 60, (3, 7))
    src[0, 6:] = config.pad_id
    with torch.no_grad():
        reference = model(src, tgt)
    decode = DecodeConfig(beam_size=3, extra_len=8)
    hypotheses = beam_search(model, src, decode)
    for_decoding(model)
    assert model.logits_bias is None  # all zeros: dropped
    matrices = [p for p in model.parameters() if p.dim() == 2]
    assert len(matrices) == 1 + 6 * config.n_layers + 10 * config.decoder_layers  # embedding, encoder, decoder
    assert all(is_column_major(p) for p in matrices)
    with torch.no_grad():
        assert (model(src, tgt) - reference).abs().max() < 1e-5
    again = beam_search(cpu.step_model(model), src, decode)  # the CPU's step: the same hypotheses, scores to rounding
    assert [[h.tokens for h in hyps] for hyps in again] == [[h.tokens for h in hyps] for hyps in hypotheses]
    for hyps, ref in zip(again, hypotheses):
        assert all(abs(h.score - r.score) < 1e-4 for h, r in zip(hyps, ref))


def test_for_decoding_keeps_a_real_logits_bias():
    model = Transformer(ModelConfig.preset("tiny", vocab_size=60, final_logits_bias=True))
    with torch.no_grad():
        model.logits_bias[5] = 2.0
    assert torch.equal(for_decoding(model).logits_bias[5], torch.tensor(2.0))


def test_a_skeleton_model_imports_no_compiler():
    """A model built on the meta device to receive saved weights (every load) runs no initialiser:
    on meta tensors those import torch._dynamo and sympy, about 70 MiB more for a translator."""
    code = (
        "import sys, torch\nfrom aiayn import ModelConfig, Transformer\n"
        "with torch.device('meta'):\n    Transformer(ModelConfig.preset('tiny', vocab_size=50))\n"
        "print(sorted(m for m in ('torch._dynamo', 'sympy') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_encoding_by_length_equals_the_padded_batch():
    """TransformerStep encodes an unsorted batch in groups of similar length: the same encodings."""
    from aiayn.decode.step import TransformerStep

    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", vocab_size=60)
    model = Transformer(config).eval()
    lengths = torch.tensor([3, 12, 5, 9, 2, 12, 7, 4, 6, 11])
    src = torch.randint(4, 60, (10, 12))
    src[torch.arange(12)[None, :] >= lengths[:, None]] = config.pad_id
    with torch.no_grad():
        padded, mask = model.encode(src)
        grouped, grouped_mask = TransformerStep(model).encode_by_length(src)
    real = mask[:, 0, 0, :, None]  # (B, S, 1)
    assert torch.equal(grouped_mask, mask)
    assert ((grouped - padded) * real).abs().max() < 1e-5
    assert not grouped[lengths < 6, 11].any()  # the shortest group was cut to 5 positions


def test_detach_gives_back_the_pages_it_reads_as_it_goes(tmp_path, monkeypatch):
    """A read maps a block of the file's page cache around it (up to 2 MiB where the kernel caches files in large
    blocks): detaching many small tensors spread over a file once held tens of MiB at a load's peak."""
    small = {f"{i:02d}a": torch.full((64,), float(i)) for i in range(24)}
    filler = {f"{i:02d}b": torch.zeros(1 << 18) for i in range(24)}  # 1 MiB between the small tensors
    path = tmp_path / "w.safetensors"
    save_file(small | filler, path)
    maps = MappedReads()
    mapped = maps.read(path)
    model = torch.nn.ParameterList([torch.nn.Parameter(mapped[name], requires_grad=False) for name in small])

    def mapped_kib() -> int:  # resident KiB of this process's mappings of the file
        rss, inside = 0, False
        for line in Path("/proc/self/smaps").read_text().splitlines():
            if line[:1].isdigit() or line[:1] in "abcdef" and "-" in line.split()[0]:
                inside = line.rstrip().endswith(str(path))
            elif inside and line.startswith("Rss:"):
                rss += int(line.split()[1])
        return rss

    held, drop = [], MappedReads._drop_pages
    monkeypatch.setattr(MappedReads, "_drop_pages", lambda self: held.append(mapped_kib()) or drop(self))
    maps.detach(model)
    assert len(held) == len(small) and max(held) <= 2048 + 64  # at most one block held at a time
    assert all(torch.equal(p, small[name]) and not maps.holds(p) for p, name in zip(model, small))
