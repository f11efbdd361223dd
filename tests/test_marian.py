"""Released Marian (opus-mt) checkpoints in aiayn, and aiayn models out to Marian and CTranslate2 (M6).

Nothing comes from a hub: the checkpoints are random-weight MarianMTModels with SentencePiece
vocabularies trained here on Multi30k, saved with save_pretrained; transformers and CTranslate2
are the references.
"""

from __future__ import annotations

import gzip
import io as _io
import json
import math
import os
import pickle
import shutil
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

os.environ["HF_HUB_OFFLINE"] = "1"
transformers = pytest.importorskip("transformers")

from aiayn import weights  # noqa: E402
from aiayn.cli import main as cli  # noqa: E402
from aiayn.config import ModelConfig  # noqa: E402
from aiayn.data.vocab import Vocab  # noqa: E402
from aiayn.decode.greedy import greedy_search  # noqa: E402
from aiayn.marian import load_marian, model_config_from_marian  # noqa: E402
from aiayn.marian.load import MARIAN_DEFAULTS  # noqa: E402
from aiayn.model import Transformer, sinusoid_table  # noqa: E402
from aiayn.model_folder import load_any  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "../shared/data" / "multi30k"
MAX_LENGTH = 20  # HF max_length, the start token included: at most 19 generated tokens
EOS_BIAS = 3.3  # added to </s>'s logit: some hypotheses end early, some reach the cap


def read_lines(name: str, n: int) -> list[str]:
    with gzip.open(DATA / name, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for _, line in zip(range(n), f)]


def train_spm(sentences: list[str], size: int) -> bytes:
    out = _io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=out,
        vocab_size=size,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
        num_threads=2,
    )
    return out.getvalue()


def marian_vocab(*protos: bytes) -> dict[str, int]:
    """An opus-mt style vocab.json: </s> 0, <unk> 1, the pieces of both models, <pad> last."""
    vocab = {"</s>": 0, "<unk>": 1}
    for proto in protos:
        sp = spm.SentencePieceProcessor(model_proto=proto)
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


def build_marian(directory: Path, eos_bias: float = EOS_BIAS, seed: int = 1, forced_eos: bool = False, **sizes) -> Path:
    """A random-weight opus-mt-like checkpoint: en source.spm, de target.spm, joint vocab.json, swish,
    scaled embeddings, 2 encoder + 3 decoder layers; weights drawn wide and </s> favoured by the
    logits bias so that hypotheses end at many different lengths."""
    src_spm, tgt_spm = train_spm(read_lines("train.en.gz", 3000), 300), train_spm(read_lines("train.de.gz", 3000), 300)
    vocab = marian_vocab(src_spm, tgt_spm)
    V = len(vocab)
    sizes = (
        dict(
            encoder_layers=2,
            decoder_layers=3,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
        )
        | sizes
    )
    config = transformers.MarianConfig(
        vocab_size=V,
        d_model=32,
        max_position_embeddings=128,
        pad_token_id=V - 1,
        decoder_start_token_id=V - 1,
        eos_token_id=0,
        activation_function="swish",
        scale_embedding=True,
        **sizes,
    )
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" not in name:  # the fixed sinusoids (not saved)
                p.add_(torch.randn_like(p) * 0.1) if "layer_norm" in name else p.normal_(0, 0.15)
        model.model.shared.weight[V - 1].zero_()  # <pad>, the start token, is a zero row as in opus-mt
        bias = torch.randn(V) * 0.5
        bias[0] += eos_bias  # </s>
        model.final_logits_bias.copy_(bias[None])
    # forced_eos_token_id=None: a hypothesis is cut at the length cap; 0: </s> is forced there (opus-mt's).
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=V - 1,
        eos_token_id=0,
        pad_token_id=V - 1,
        forced_eos_token_id=0 if forced_eos else None,
        bad_words_ids=[[V - 1]],
        num_beams=4,
        length_penalty=0.6,
        max_length=MAX_LENGTH,
    )
    model.save_pretrained(directory)
    (directory / "source.spm").write_bytes(src_spm)
    (directory / "target.spm").write_bytes(tgt_spm)
    (directory / "vocab.json").write_text(json.dumps(vocab))
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MarianTokenizer"}))
    return directory


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory) -> Path:
    return build_marian(tmp_path_factory.mktemp("marian"))


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return read_lines("val.en.gz", 24)


def hf_batch(directory: Path, texts: list[str]):
    tokenizer = transformers.MarianTokenizer.from_pretrained(directory)
    return tokenizer, tokenizer(texts, return_tensors="pt", padding=True)


def generated(rows: torch.Tensor, eos: int, pad: int) -> list[list[int]]:
    """HF generate's rows without the start token, cut after </s>, pad dropped."""
    out = []
    for row in rows.tolist():
        row = [t for t in row[1:] if t != pad]
        out.append(row[: row.index(eos) + 1] if eos in row else row)
    return out


def test_marian_checkpoint_runs_in_aiayn_with_transformers_logits(marian_dir, sentences):
    hf = transformers.MarianMTModel.from_pretrained(marian_dir).eval()
    model, tokenizer, decode = load_marian(marian_dir)
    cfg = model.config
    assert (cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.sinusoid_layout, cfg.activation) == (cfg.vocab_size - 1,) * 2 + (
        0,
        "halves",
        "swish",
    )
    assert (cfg.n_layers, cfg.decoder_layers) == (2, 3)
    assert (decode.beam_size, decode.alpha, decode.length_penalty, decode.max_len) == (4, 0.6, "power", MAX_LENGTH - 1)
    # HF's [sin | cos] table is aiayn's "halves" sinusoid table, to the bit
    assert torch.equal(hf.model.encoder.embed_positions.weight, sinusoid_table(128, 32, "halves"))
    hf_tok, batch = hf_batch(marian_dir, sentences)
    assert tokenizer.encode_source(sentences) == hf_tok(sentences).input_ids
    targets = read_lines("val.de.gz", 24)
    assert tokenizer.encode_target(targets) == hf_tok(text_target=targets).input_ids
    tgt_in = torch.randint(0, cfg.vocab_size - 1, (len(sentences), 15))
    tgt_in[:, 0] = cfg.bos_id
    with torch.no_grad():
        expected = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask, decoder_input_ids=tgt_in).logits
        logits = model(batch.input_ids, tgt_in)
    assert (logits - expected).abs().max().item() < 1e-4


def test_greedy_and_beam_translations_equal_generate(marian_dir, sentences):
    from aiayn.decode.beam import beam_search  # issue 4's beam search

    hf = transformers.MarianMTModel.from_pretrained(marian_dir).eval()
    model, tokenizer, decode = load_marian(marian_dir)
    hf_tok, batch = hf_batch(marian_dir, sentences)
    eos, pad = model.config.eos_id, model.config.pad_id
    with torch.no_grad():
        hf_greedy = generated(hf.generate(**batch, num_beams=1, do_sample=False), eos, pad)
        hf_beam = generated(hf.generate(**batch), eos, pad)  # generation_config: beam 4, length_penalty 0.6
    ours_greedy = generated(
        torch.cat(
            [torch.zeros_like(batch.input_ids[:, :1]), greedy_search(model, batch.input_ids, max_len=decode.max_len)], 1
        ),
        eos,
        pad,
    )
    ours_beam = [hyps[0].tokens for hyps in beam_search(model, batch.input_ids, decode)]
    assert ours_greedy == hf_greedy
    assert ours_beam == hf_beam
    lengths = {len(h) for h in hf_beam}
    assert len(lengths) >= 3 and max(lengths) == MAX_LENGTH - 1  # some end early, some reach the cap
    assert ours_beam != ours_greedy  # beam search did something greedy did not
    texts = [tokenizer.decode(h) for h in ours_beam]
    assert texts == hf_tok.batch_decode(hf_beam, skip_special_tokens=True, use_source_tokenizer=False)
    from aiayn.translator import Translator  # `aiayn translate --model DIR`: batches sorted by length

    assert Translator.load(marian_dir).translate(sentences) == texts


def test_encoder_and_decoder_of_different_widths_and_head_counts_equal_generate(tmp_path, sentences):
    """A Marian configuration whose stacks differ (issue 12): per-stack sizes load, translate as generate does."""
    from aiayn.decode.beam import beam_search
    from aiayn.translator import Translator

    d = build_marian(
        tmp_path / "stacks",
        encoder_ffn_dim=48,
        decoder_ffn_dim=96,
        encoder_attention_heads=2,
        decoder_attention_heads=8,
    )
    hf = transformers.MarianMTModel.from_pretrained(d).eval()
    model, tokenizer, decode = load_marian(d)
    assert (model.config.encoder.heads, model.config.encoder.d_ff) == (2, 48)
    assert (model.config.decoder.heads, model.config.decoder.d_k, model.config.decoder.d_ff) == (8, 4, 96)
    hf_tok, batch = hf_batch(d, sentences)
    eos, pad = model.config.eos_id, model.config.pad_id
    with torch.no_grad():
        assert (
            model(batch.input_ids, batch.input_ids[:, :7])
            - hf(**batch, decoder_input_ids=batch.input_ids[:, :7]).logits
        ).abs().max() < 1e-4
        hf_beam = generated(hf.generate(**batch), eos, pad)
    assert [hyps[0].tokens for hyps in beam_search(model, batch.input_ids, decode)] == hf_beam
    texts = hf_tok.batch_decode(hf_beam, skip_special_tokens=True, use_source_tokenizer=False)
    assert Translator.load(d).translate(sentences) == texts


def test_forced_eos_at_the_length_cap_equals_generate(tmp_path, sentences):
    from aiayn.decode.beam import beam_search
    from aiayn.decode.greedy import greedy_hypotheses

    directory = build_marian(tmp_path / "forced", forced_eos=True)
    hf = transformers.MarianMTModel.from_pretrained(directory).eval()
    model, _, decode = load_marian(directory)
    assert decode.forced_eos
    _, batch = hf_batch(directory, sentences)
    eos, pad = model.config.eos_id, model.config.pad_id
    with torch.no_grad():
        hf_greedy = generated(hf.generate(**batch, num_beams=1, do_sample=False), eos, pad)
        hf_beam = generated(hf.generate(**batch), eos, pad)
    from aiayn import cpu

    for step in (model, cpu.step_model(model)):  # the paper's step and the CPU's
        greedy = greedy_hypotheses(step, batch.input_ids, decode.replace(beam_size=1))
        ours_greedy = [hyps[0].tokens for hyps in greedy]
        ours_beam = [hyps[0].tokens for hyps in beam_search(step, batch.input_ids, decode)]
        assert ours_greedy == hf_greedy and ours_beam == hf_beam
    capped = [h for h in hf_beam + hf_greedy if len(h) == MAX_LENGTH - 1]
    assert capped and all(h[-1] == eos for h in capped)  # the cap was reached, and </s> forced there


def test_opus_mt_en_de_shapes_count_74_410_496_parameters():
    opus_mt_en_de = {
        "model_type": "marian",
        "architectures": ["MarianMTModel"],
        "vocab_size": 58101,
        "d_model": 512,
        "encoder_layers": 6,
        "decoder_layers": 6,
        "encoder_attention_heads": 8,
        "decoder_attention_heads": 8,
        "encoder_ffn_dim": 2048,
        "decoder_ffn_dim": 2048,
        "max_position_embeddings": 512,
        "activation_function": "swish",
        "scale_embedding": True,
        "pad_token_id": 58100,
        "decoder_start_token_id": 58100,
        "eos_token_id": 0,
    }
    config = model_config_from_marian({**MARIAN_DEFAULTS, **opus_mt_en_de}, unk_id=1)
    model = Transformer(config)
    assert model.num_parameters(count_positions=True) == 74_410_496
    assert model.num_parameters() == 74_410_496 - 2 * 512 * 512


def copy_dir(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_not_a_supported_model_gets_a_clear_error(marian_dir, tmp_path):
    d = copy_dir(marian_dir, tmp_path / "no-spm")
    (d / "source.spm").unlink()
    with pytest.raises(FileNotFoundError, match="source.spm"):
        load_marian(d)
    d = copy_dir(marian_dir, tmp_path / "no-weights")
    (d / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors or pytorch_model.bin"):
        load_marian(d)
    d = copy_dir(marian_dir, tmp_path / "bart")
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "model_type": "bart"}))
    with pytest.raises(ValueError, match="model_type 'bart' is not supported"):
        load_marian(d)
    (d / "config.json").write_text(json.dumps({**config, "architectures": ["MarianForCausalLM"]}))
    with pytest.raises(ValueError, match="architecture MarianForCausalLM is not supported"):
        load_marian(d)
    V = config["vocab_size"]
    (d / "config.json").write_text(json.dumps({**config, "vocab_size": V + 1, "decoder_vocab_size": V + 1}))
    with pytest.raises(ValueError, match="vocabulary size does not match"):
        load_marian(d)  # vocab.json has V pieces
    vocab = json.loads((d / "vocab.json").read_text())
    vocab["extra"] = V
    (d / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(ValueError, match=r"model.shared.weight|vocabulary size does not match the weights"):
        load_marian(d)  # config and vocab.json agree on V + 1, the weights have V rows
    assert cli(["convert", str(tmp_path / "bart"), str(tmp_path / "out"), "--to", "aiayn"]) == 2
    from safetensors.torch import load_file, save_file

    d = copy_dir(marian_dir, tmp_path / "extra")
    weights = load_file(d / "model.safetensors")
    weights["model.encoder.layernorm_embedding.weight"] = torch.ones(32)  # a variant aiayn cannot run
    save_file(weights, d / "model.safetensors")
    with pytest.raises(ValueError, match="no place for: encoder.layernorm_embedding.weight"):
        load_marian(d)


def test_pytorch_model_bin_is_read_without_running_pickled_code(marian_dir, tmp_path, sentences):
    from safetensors.torch import load_file

    d = copy_dir(marian_dir, tmp_path / "bin")
    torch.save(load_file(d / "model.safetensors"), d / "pytorch_model.bin")
    (d / "model.safetensors").unlink()
    model, tokenizer, _ = load_marian(d)
    reference, _, _ = load_marian(marian_dir)
    src = torch.tensor(tokenizer.encode_source(sentences[:1]))
    with torch.no_grad():
        assert torch.equal(model(src, src[:, :3]), reference(src, src[:, :3]))
    (d / "pytorch_model.bin").write_bytes(pickle.dumps(Exploit()))
    with pytest.raises(ValueError) as refused:
        load_marian(d)
    assert not (tmp_path / "pwned").exists()
    message = str(refused.value)  # one line, and none of torch's advice to load it with weights_only=False
    assert message.startswith(f"{d / 'pytorch_model.bin'}: refused: not a state dict of plain tensors (")
    assert message.endswith("nothing in it was run") and "\n" not in message and "weights_only" not in message
    from aiayn import weights

    torch_version = torch.__version__
    try:  # a torch whose weights_only check could be broken (before 2.6) is not trusted with the file at all
        torch.__version__ = "2.5.1"
        with pytest.raises(ValueError, match="not read: torch 2.5.1 cannot load a pickle without risk"):
            weights.load_plain_pickle(d / "pytorch_model.bin", "a state dict")
    finally:
        torch.__version__ = torch_version


class Exploit:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


@pytest.fixture(scope="module")
def aiayn_dir(tmp_path_factory) -> Path:
    """An aiayn model as training writes it: the paper's interleaved sinusoids, <s> as start token,
    pad id 0, a shared BPE vocabulary; </s>'s row made long so that some outputs end early."""
    vocab = Vocab.train(read_lines("train.en.gz", 2000) + read_lines("train.de.gz", 2000), 400)
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=len(vocab), max_len=64)).eval()
    with torch.no_grad():
        model.encoder.embed.weight[vocab.eos_id] *= 4
    return weights.save_model(model, tmp_path_factory.mktemp("aiayn") / "model", vocab.proto)


def test_aiayn_to_marian_and_ctranslate2_translate_identically(aiayn_dir, sentences, tmp_path):
    model, vocab, _ = load_any(aiayn_dir)
    assert model.config.sinusoid_layout == "interleaved" and model.config.bos_id != model.config.pad_id
    ids = vocab.encode_source(sentences)
    src = torch.tensor([s + [0] * (max(map(len, ids)) - len(s)) for s in ids])
    ours = [
        vocab.pieces(h)
        for h in generated(
            torch.cat([src[:, :1], greedy_search(model, src, max_len=MAX_LENGTH - 1)], 1),
            model.config.eos_id,
            model.config.pad_id,
        )
    ]
    assert len({len(h) for h in ours}) >= 2
    assert cli(["convert", str(aiayn_dir), str(tmp_path / "hf"), "--to", "marian"]) == 0
    hf = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    hf_tok, batch = hf_batch(tmp_path / "hf", sentences)
    with torch.no_grad():
        out = hf.generate(**batch, num_beams=1, max_length=MAX_LENGTH)
    hf_pieces = [
        hf_tok.convert_ids_to_tokens(h) for h in generated(out, hf.config.eos_token_id, hf.config.pad_token_id)
    ]
    assert hf_pieces == ours
    back, tokenizer, _ = load_marian(tmp_path / "hf")  # and back into aiayn: the same again
    assert tokenizer.encode_source(sentences) == hf_tok(sentences).input_ids
    again = generated(
        torch.cat([batch.input_ids[:, :1], greedy_search(back, batch.input_ids, max_len=MAX_LENGTH - 1)], 1),
        back.config.eos_id,
        back.config.pad_id,
    )
    assert [[tokenizer.id_to_piece[i] for i in h] for h in again] == ours

    ctranslate2 = pytest.importorskip("ctranslate2")
    assert cli(["convert", str(aiayn_dir), str(tmp_path / "ct2"), "--to", "ctranslate2"]) == 0
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    results = translator.translate_batch(
        [vocab.pieces(s) for s in ids],
        beam_size=1,
        min_decoding_length=0,
        max_decoding_length=MAX_LENGTH - 1,
        return_end_token=True,
    )
    assert [r.hypotheses[0] for r in results] == ours
    assert (
        cli(["convert", str(aiayn_dir), str(tmp_path / "ct2-int8"), "--to", "ctranslate2", "--quantization", "int8"])
        == 0
    )
    int8 = ctranslate2.Translator(str(tmp_path / "ct2-int8"), device="cpu")
    assert len(int8.translate_batch([vocab.pieces(s) for s in ids[:2]], max_decoding_length=MAX_LENGTH)) == 2


def test_marian_to_aiayn_directory_and_back(marian_dir, sentences, tmp_path):
    assert cli(["convert", str(marian_dir), str(tmp_path / "aiayn"), "--to", "aiayn"]) == 0
    assert cli(["convert", str(marian_dir), str(tmp_path / "aiayn"), "--to", "aiayn"]) == 2  # exists: --force
    model, tokenizer, decode = load_any(tmp_path / "aiayn")
    reference, ref_tokenizer, ref_decode = load_marian(marian_dir)
    assert decode == ref_decode and tokenizer.vocab == ref_tokenizer.vocab
    src = torch.tensor(tokenizer.encode_source(sentences[:1]))
    with torch.no_grad():
        assert torch.equal(model(src, src[:, :4]), reference(src, src[:, :4]))
    assert cli(["convert", str(tmp_path / "aiayn"), str(tmp_path / "marian"), "--to", "marian"]) == 0
    hf = transformers.MarianMTModel.from_pretrained(tmp_path / "marian").eval()
    original = transformers.MarianMTModel.from_pretrained(marian_dir).eval()
    with torch.no_grad():
        assert torch.equal(
            hf(input_ids=src, decoder_input_ids=src[:, :4]).logits,
            original(input_ids=src, decoder_input_ids=src[:, :4]).logits,
        )


def validation_nll(model: Transformer, tokenizer, n: int = 200) -> float:
    """Per-token negative log-likelihood of the first n Multi30k validation pairs (teacher forcing)."""
    pairs = zip(
        tokenizer.encode_source(read_lines("val.en.gz", n)), tokenizer.encode_target(read_lines("val.de.gz", n))
    )
    src_ids, tgt_ids = zip(*[(s, t) for s, t in pairs if max(len(s), len(t)) <= 64])
    n = len(src_ids)
    pad, bos = model.config.pad_id, model.config.bos_id
    S, T = max(map(len, src_ids)), max(map(len, tgt_ids))
    src = torch.tensor([s + [pad] * (S - len(s)) for s in src_ids])
    tgt_out = torch.tensor([t + [pad] * (T - len(t)) for t in tgt_ids])
    tgt_in = torch.cat([torch.full((n, 1), bos), tgt_out[:, :-1]], dim=1)
    with torch.no_grad():
        log_probs = model.eval()(src, tgt_in).log_softmax(-1)
    nll = -log_probs.gather(-1, tgt_out[..., None])[..., 0]
    keep = tgt_out != pad
    return float(nll[keep].mean())


@pytest.mark.parametrize("init", ["marian", "converted"])
def test_fine_tuning_from_a_converted_checkpoint_lowers_validation_loss(marian_dir, tmp_path, init):
    """`aiayn train RECIPE --init DIR` on Multi30k (test_2016_flickr as training text, val to score),
    from the Marian directory itself or from the aiayn directory `aiayn convert --to aiayn` made of it."""
    if init == "converted":
        assert cli(["convert", str(marian_dir), str(tmp_path / "converted"), "--to", "aiayn"]) == 0
    init_dir = marian_dir if init == "marian" else tmp_path / "converted"
    recipe = tmp_path / "finetune.yaml"
    recipe.write_text(f"""
data: {{train: {DATA / "test_2016_flickr"}, valid: {DATA / "val"}, test: "", src_lang: en, tgt_lang: de, max_subwords: 64}}
model: {{}}
train: {{batch_tokens: 1024, warmup_steps: 8, lr_factor: 1.0, max_steps: 15, eval_every: 0, eval_bleu: false,
        save_every: 15, keep_checkpoints: 1, average_last: 1, threads: 2, device: cpu}}
""")
    model, tokenizer, _ = load_marian(marian_dir)
    before = validation_nll(model, tokenizer)
    assert cli(["train", str(recipe), "--init", str(init_dir), "--out", str(tmp_path / "run")]) == 0
    tuned = weights.load_model(tmp_path / "run" / "model")
    assert tuned.config == model.config  # the same architecture and vocabulary
    after = validation_nll(tuned, tokenizer)
    assert after < 0.8 * before and after < math.log(model.config.vocab_size), (before, after)  # below uniform
    from aiayn.translator import Translator  # the fine-tuned model keeps the Marian tokenizer

    texts = read_lines("val.en.gz", 8)
    assert Translator.load(tmp_path / "run" / "model").translate(texts) == Translator(tuned, tokenizer).translate(texts)


def test_separate_vocabularies_and_an_untied_output_layer(marian_dir, sentences, tmp_path):
    """share_encoder_decoder_embeddings=False with a larger target vocabulary, untied lm_head, relu."""
    d = tmp_path / "separate"
    d.mkdir()
    for name in ("source.spm", "target.spm"):
        shutil.copy(marian_dir / name, d / name)
    source, target = (marian_vocab((d / name).read_bytes()) for name in ("source.spm", "target.spm"))
    n = max(len(source), len(target)) + 1  # one <pad> id for both sides, as transformers needs
    for vocab, size in ((source, n), (target, n + 2)):
        del vocab["<pad>"]
        vocab.update({f"<extra{i}>": i for i in range(len(vocab), size) if i != n - 1})
        vocab["<pad>"] = n - 1
    (d / "vocab.json").write_text(json.dumps(source))
    (d / "target_vocab.json").write_text(json.dumps(target))
    (d / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "MarianTokenizer", "separate_vocabs": True})
    )
    config = transformers.MarianConfig(
        vocab_size=n,
        decoder_vocab_size=n + 2,
        share_encoder_decoder_embeddings=False,
        tie_word_embeddings=False,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        pad_token_id=n - 1,
        decoder_start_token_id=n - 1,
        eos_token_id=0,
        activation_function="relu",
        scale_embedding=False,
    )
    hf = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "embed_positions" not in name:
                p.add_(torch.randn_like(p) * 0.1) if "layer_norm" in name else p.normal_(0, 0.15)
        hf.final_logits_bias.normal_(0, 0.5)
    hf.save_pretrained(d)
    hf = transformers.MarianMTModel.from_pretrained(d).eval()
    model, tokenizer, _ = load_marian(d)
    assert (model.config.vocab_size, model.config.target_vocab_size, model.config.tie_output) == (n, n + 2, False)
    hf_tok, batch = hf_batch(d, sentences)
    targets = read_lines("val.de.gz", 24)
    assert tokenizer.encode_source(sentences) == hf_tok(sentences).input_ids
    assert tokenizer.encode_target(targets) == hf_tok(text_target=targets).input_ids
    tgt_in = torch.randint(0, n + 2, (len(sentences), 9))
    tgt_in[:, 0] = n - 1
    with torch.no_grad():
        expected = hf(**batch, decoder_input_ids=tgt_in).logits
        assert (model(batch.input_ids, tgt_in) - expected).abs().max().item() < 1e-4
    assert cli(["convert", str(d), str(tmp_path / "aiayn"), "--to", "aiayn"]) == 0
    assert cli(["convert", str(tmp_path / "aiayn"), str(tmp_path / "back"), "--to", "marian"]) == 0
    back = transformers.MarianMTModel.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        assert torch.equal(back(**batch, decoder_input_ids=tgt_in).logits, expected)
    assert (
        transformers.MarianTokenizer.from_pretrained(tmp_path / "back")(text_target=targets).input_ids
        == hf_tok(text_target=targets).input_ids
    )


def test_int8_translator_on_a_marian_directory_stays_close_to_float32(marian_dir, sentences):
    """--int8 on a Marian checkpoint (with a non-zero final_logits_bias): one int8 vocabulary, close output."""
    from aiayn.cpu.quantize import Int8Projection
    from aiayn.translator import Translator

    plain, int8 = Translator.load(marian_dir), Translator.load(marian_dir, int8=True)
    assert isinstance(int8.model.output_proj, Int8Projection) and int8.model.output_proj.bias is not None
    ref, out = plain.translate(sentences, beam_size=2), int8.translate(sentences, beam_size=2)
    assert len(out) == len(sentences) and all(out)
    same = sum(a == b for a, b in zip(ref, out))
    assert same >= 3 * len(sentences) // 4, (same, list(zip(ref, out))[:3])  # 22 of 24 when written
