"""aiayn models out to the formats deployments use: a Hugging Face Marian directory, CTranslate2.

Hugging Face's Marian fixes two things that aiayn leaves to the config: the positional table is
[sin | cos] halves, and there is a logits bias. A model trained with the paper's interleaved
sinusoids (§3.5) is still exported exactly: relabelling the d_model coordinates of the residual
stream by the permutation that turns the interleaved table into the halved one, in every tensor
that reads or writes that stream, computes the same function (layer norm does not depend on the
order of coordinates). The decoder's start token is written as decoder_start_token_id.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from .. import weights
from ..config import ModelConfig
from ..data.vocab import Vocab
from ..files import temporary_beside
from ..model import Transformer, sinusoid_table
from .load import CONFIG, GENERATION_CONFIG, SAFETENSORS
from .tokenizer import SOURCE_SPM, TARGET_SPM, TARGET_VOCAB, TOKENIZER_CONFIG, VOCAB, MarianTokenizer

ACTIVATION_NAMES = {"relu": "relu", "gelu": "gelu", "swish": "swish"}
# aiayn name fragment -> Hugging Face's (the inverse of load.MARIAN_RENAMES).
HF_RENAMES = [
    (".ffn.fc1.", ".fc1."),
    (".ffn.fc2.", ".fc2."),
    (".cross_attn_layer_norm.", ".encoder_attn_layer_norm."),
    (".cross_attn.", ".encoder_attn."),
]


def halves_permutation(d_model: int) -> Tensor:
    """perm with interleaved_table[:, perm] == halves_table: the even coordinates, then the odd ones."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def permute_residual(state: dict[str, Tensor], perm: Tensor) -> dict[str, Tensor]:
    """Relabel the residual stream's coordinates x -> x[perm] in every tensor that touches it.

    Embeddings and projections that read the stream (W^Q, W^K, W^V, W_1, the output projection)
    permute their input columns; those that write it (W^O, W_2) their output rows and biases;
    layer norm gains and biases follow their coordinates. Attention heads and the FFN's inner
    width are untouched, so the model computes exactly the same function.
    """
    out = {}
    for name, t in state.items():
        if name.endswith(("embed.weight", "output_proj.weight")) or name.endswith(
            tuple(f"{p}.weight" for p in ("q_proj", "k_proj", "v_proj", "ffn.fc1"))
        ):
            t = t[:, perm]
        elif name.endswith(("out_proj.weight", "ffn.fc2.weight")):
            t = t[perm, :]
        elif name.endswith(("out_proj.bias", "ffn.fc2.bias")) or "layer_norm." in name:
            t = t[perm]
        out[name] = t.contiguous()
    return out


def marian_config(config: ModelConfig) -> dict:
    """config.json of the Hugging Face Marian model that computes what Transformer(config) computes."""
    if config.positions != "sinusoidal":
        raise ValueError(
            "learned positions (Table 3 row E) cannot be exported: Marian's position table is fixed sinusoids"
        )
    for stack in (config.encoder, config.decoder):
        if stack.heads * stack.d_k != config.d_model or stack.d_v != stack.d_k:
            raise ValueError(
                f"d_k {stack.d_k}, d_v {stack.d_v} with {stack.heads} heads cannot be exported: "
                "Marian's heads are d_model / h wide"
            )
    if config.layer_norm_eps != 1e-5:
        raise ValueError(f"layer_norm_eps {config.layer_norm_eps} cannot be exported: Marian's layer norms use 1e-5")
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": config.vocab_size,
        "decoder_vocab_size": config.target_vocab_size,
        "d_model": config.d_model,
        "encoder_layers": config.n_layers,
        "decoder_layers": config.decoder_layers,
        "encoder_attention_heads": config.encoder.heads,
        "decoder_attention_heads": config.decoder.heads,
        "encoder_ffn_dim": config.encoder.d_ff,
        "decoder_ffn_dim": config.decoder.d_ff,
        "activation_function": ACTIVATION_NAMES[config.activation],
        "dropout": config.p_drop,
        "attention_dropout": config.p_attn_drop,
        "activation_dropout": config.p_ffn_drop,
        "max_position_embeddings": config.max_len,
        "scale_embedding": config.scale_embedding,
        "share_encoder_decoder_embeddings": config.share_embeddings,
        "tie_word_embeddings": config.tie_output,
        "pad_token_id": config.pad_id,
        "eos_token_id": config.eos_id,
        "decoder_start_token_id": config.bos_id,
        "forced_eos_token_id": None,
        "bos_token_id": None,
        "is_encoder_decoder": True,
        "dtype": "float32",
    }


def generation_config(config: ModelConfig, beam_size: int = 4, alpha: float = 0.6) -> dict:
    """generation_config.json: aiayn's decoding as far as HF says it ("power" length penalty, no forced </s>)."""
    banned = sorted({config.pad_id, config.bos_id})  # never generated: padding and the start token
    return {
        "decoder_start_token_id": config.bos_id,
        "eos_token_id": config.eos_id,
        "pad_token_id": config.pad_id,
        "forced_eos_token_id": None,
        "bad_words_ids": [[i] for i in banned],
        "num_beams": beam_size,
        "length_penalty": alpha,
        "max_length": config.max_len,
    }


def pad_last_order(vocab_size: int, pad_id: int) -> Tensor:
    """Old ids in their new order: every id but <pad>, then <pad> (Marian's and CTranslate2's layout)."""
    ids = torch.arange(vocab_size)
    return torch.cat([ids[ids != pad_id], ids[ids == pad_id]])


def relabel_tokens(model: Transformer, order: Tensor) -> tuple[dict[str, Tensor], ModelConfig]:
    """The same model with token new_id = position of old id in order: rows of embeddings and output permuted."""
    config = model.config
    new_id = torch.empty_like(order)
    new_id[order] = torch.arange(order.numel())
    state = {}
    for name, t in model.state_dict().items():
        if name.endswith(("embed.weight", "output_proj.weight", "logits_bias")):
            t = t[order]
        state[name] = t.detach().float().cpu().contiguous()
    ids = {k: int(new_id[getattr(config, k)]) for k in ("pad_id", "bos_id", "eos_id", "unk_id")}
    return state, config.replace(**ids)


def hf_state_dict(state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """An aiayn state dict under Hugging Face MarianMTModel's names (residual stream permuted if need be)."""
    if config.sinusoid_layout == "interleaved":
        perm = halves_permutation(config.d_model)
        assert torch.equal(sinusoid_table(4, config.d_model)[:, perm], sinusoid_table(4, config.d_model, "halves"))
        state = permute_residual(state, perm)
    state = dict(state)
    out = {
        "model.shared.weight" if config.share_embeddings else "model.encoder.embed_tokens.weight": state.pop(
            "encoder.embed.weight"
        )
    }
    decoder_embed = state.pop("decoder.embed.weight")
    if not config.share_embeddings:
        out["model.decoder.embed_tokens.weight"] = decoder_embed
    if "output_proj.weight" in state:
        out["lm_head.weight"] = state.pop("output_proj.weight")
    bias = state.pop("logits_bias", None)
    out["final_logits_bias"] = (bias if bias is not None else torch.zeros(config.target_vocab_size))[None, :]
    for name, tensor in state.items():
        for old, new in HF_RENAMES:
            name = name.replace(old, new)
        out["model." + name] = tensor
    return {k: v.contiguous() for k, v in out.items()}


def spm_tokenizer_files(spm_proto: bytes, order: Tensor, max_len: int = 512) -> dict[str, bytes]:
    """source.spm and target.spm (the shared model, twice), vocab.json (piece -> relabelled id)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=spm_proto)
    if sp.get_piece_size() != order.numel():
        raise ValueError(f"spm.model has {sp.get_piece_size()} pieces, the model {order.numel()} rows")
    vocab = {sp.id_to_piece(int(old)): new for new, old in enumerate(order)}
    settings = {
        "tokenizer_class": "MarianTokenizer",
        "separate_vocabs": False,
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": max_len,
    }
    return {
        SOURCE_SPM: spm_proto,
        TARGET_SPM: spm_proto,
        VOCAB: json.dumps(vocab, ensure_ascii=False).encode(),
        TOKENIZER_CONFIG: json.dumps(settings, indent=2).encode(),
    }


def marian_tokenizer_files(tokenizer: MarianTokenizer, max_len: int = 512) -> dict[str, bytes]:
    """A Marian tokenizer's own files, written back unchanged."""
    settings = {
        "tokenizer_class": "MarianTokenizer",
        "separate_vocabs": tokenizer.separate_vocabs,
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": max_len,
    }
    files = {
        SOURCE_SPM: tokenizer.source_proto,
        TARGET_SPM: tokenizer.target_proto,
        VOCAB: json.dumps(tokenizer.vocab, ensure_ascii=False).encode(),
        TOKENIZER_CONFIG: json.dumps(settings, indent=2).encode(),
    }
    if tokenizer.separate_vocabs:
        files[TARGET_VOCAB] = json.dumps(tokenizer.target_vocab, ensure_ascii=False).encode()
    return files


def save_marian(
    model: Transformer,
    tokenizer: Vocab | MarianTokenizer,
    directory: str | Path,
    beam_size: int = 4,
    alpha: float = 0.6,
) -> Path:
    """Write a directory that transformers.MarianMTModel.from_pretrained (and load_marian) reads.

    With an aiayn SentencePiece vocabulary the token ids are relabelled so that <pad> comes last,
    as in every released Marian model (CTranslate2's converter relies on it); vocab.json says so.
    """
    config = model.config
    if isinstance(tokenizer, MarianTokenizer):
        state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
        files = marian_tokenizer_files(tokenizer, config.max_len)
    else:
        if not config.share_embeddings and config.target_vocab_size != config.vocab_size:
            raise ValueError("a model with a separate target vocabulary needs a Marian tokenizer to be exported")
        order = pad_last_order(config.vocab_size, config.pad_id)
        state, config = relabel_tokens(model, order)
        files = spm_tokenizer_files(tokenizer.proto, order, config.max_len)
    files[CONFIG] = json.dumps(marian_config(config), indent=2).encode()
    files[GENERATION_CONFIG] = json.dumps(generation_config(config, beam_size, alpha), indent=2).encode()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = temporary_beside(directory / SAFETENSORS)
    try:
        weights.save_tensors(hf_state_dict(state, config), tmp, metadata={"format": "pt"})
        tmp.replace(directory / SAFETENSORS)
    finally:
        tmp.unlink(missing_ok=True)
    for name, data in files.items():
        weights.write_atomic(directory / name, data)
    return directory
