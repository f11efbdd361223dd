"""Run a Hugging Face Marian (opus-mt) directory in aiayn's own Transformer.

A Marian model is the paper's post-norm Transformer (§3.1) with four details that are options of
`ModelConfig`: the sinusoids laid out as [sin | cos] halves, a bias on the logits, the activation
named in config.json (opus-mt uses swish), and <pad> as the decoder's start token. The weights
keep Hugging Face's names but for a few (`MARIAN_RENAMES`); nothing pickled is ever executed.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from torch import Tensor

from ..config import DecodeConfig, ModelConfig
from ..model import Transformer, sinusoid_table
from ..weights import Reader, check_state, load_plain_pickle, read_safetensors
from .tokenizer import VOCAB, MarianTokenizer, read_json

CONFIG, GENERATION_CONFIG = "config.json", "generation_config.json"
SAFETENSORS, SAFETENSORS_INDEX, TORCH_BIN = "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"
ARCHITECTURES = {"MarianMTModel", "MarianModel"}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}

# What MarianConfig assumes when config.json leaves a field out (transformers' MarianConfig defaults).
MARIAN_DEFAULTS = dict(
    vocab_size=58101,
    decoder_vocab_size=None,
    max_position_embeddings=1024,
    encoder_layers=12,
    encoder_ffn_dim=4096,
    encoder_attention_heads=16,
    decoder_layers=12,
    decoder_ffn_dim=4096,
    decoder_attention_heads=16,
    activation_function="gelu",
    d_model=1024,
    dropout=0.1,
    attention_dropout=0.0,
    activation_dropout=0.0,
    decoder_start_token_id=58100,
    scale_embedding=False,
    pad_token_id=58100,
    eos_token_id=0,
    forced_eos_token_id=0,
    share_encoder_decoder_embeddings=True,
    tie_word_embeddings=True,
)
# Tensors outside the layers that are read by name (or, tied, need not be).
EMBEDDINGS = {
    "shared.weight",
    "encoder.embed_tokens.weight",
    "decoder.embed_tokens.weight",
    "lm_head.weight",
    "final_logits_bias",
}
# Hugging Face name fragment -> aiayn name fragment (the rest of the names are equal).
MARIAN_RENAMES = [
    (".fc1.", ".ffn.fc1."),
    (".fc2.", ".ffn.fc2."),
    (".encoder_attn_layer_norm.", ".cross_attn_layer_norm."),
    (".encoder_attn.", ".cross_attn."),
]


def is_marian_model(directory: str | Path) -> bool:
    """True when directory holds a config.json whose model_type is "marian"."""
    try:
        return json.loads((Path(directory) / CONFIG).read_text()).get("model_type") == "marian"
    except (OSError, ValueError, AttributeError):
        return False


def read_marian_config(directory: str | Path) -> dict:
    """config.json with MarianConfig's defaults filled in; errors for anything that is not Marian."""
    directory = Path(directory)
    raw = read_json(directory / CONFIG)
    if raw.get("format") == "aiayn":
        raise ValueError(f"{directory / CONFIG}: an aiayn model, not a Marian one (use aiayn.weights.load_model)")
    if raw.get("model_type") != "marian":
        raise ValueError(
            f"{directory / CONFIG}: model_type {raw.get('model_type')!r} is not supported "
            '(only Hugging Face Marian models, model_type "marian")'
        )
    unknown = set(raw.get("architectures") or []) - ARCHITECTURES
    if unknown:
        raise ValueError(
            f"{directory / CONFIG}: architecture {', '.join(sorted(unknown))} is not supported "
            f"(only {', '.join(sorted(ARCHITECTURES))})"
        )
    cfg = {**MARIAN_DEFAULTS, **raw}
    if raw.get("normalize_before") or raw.get("add_final_layer_norm"):
        raise ValueError(f"{directory / CONFIG}: pre-norm Marian variants are not supported (post-norm only, §3.1)")
    return cfg


def model_config_from_marian(cfg: dict, unk_id: int) -> ModelConfig:
    """The aiayn ModelConfig of a Marian config.json (as read by `read_marian_config`)."""
    if cfg["activation_function"] not in ACTIVATIONS:
        raise ValueError(
            f"config.json: activation_function {cfg['activation_function']!r} is not supported "
            f"(choose from {', '.join(ACTIVATIONS)})"
        )
    shared = bool(cfg["share_encoder_decoder_embeddings"])
    decoder_vocab = cfg["decoder_vocab_size"] or cfg["vocab_size"]
    return ModelConfig(
        vocab_size=cfg["vocab_size"],
        tgt_vocab_size=None if shared or decoder_vocab == cfg["vocab_size"] else decoder_vocab,
        d_model=cfg["d_model"],
        d_ff=cfg["encoder_ffn_dim"],
        n_heads=cfg["encoder_attention_heads"],
        n_layers=cfg["encoder_layers"],
        n_decoder_layers=_unless_equal(cfg, "decoder_layers", "encoder_layers"),
        n_decoder_heads=_unless_equal(cfg, "decoder_attention_heads", "encoder_attention_heads"),
        d_decoder_ff=_unless_equal(cfg, "decoder_ffn_dim", "encoder_ffn_dim"),
        p_drop=cfg["dropout"],
        p_attn_drop=cfg["attention_dropout"],
        p_ffn_drop=cfg["activation_dropout"],
        max_len=cfg["max_position_embeddings"],
        pad_id=cfg["pad_token_id"],
        bos_id=cfg["decoder_start_token_id"],
        eos_id=cfg["eos_token_id"],
        unk_id=unk_id,
        positions="sinusoidal",
        sinusoid_layout="halves",
        activation=ACTIVATIONS[cfg["activation_function"]],
        scale_embedding=bool(cfg["scale_embedding"]),
        share_embeddings=shared,
        tie_output=bool(cfg["tie_word_embeddings"]),
        final_logits_bias=True,
        layer_norm_eps=1e-5,
    )


def _unless_equal(cfg: dict, decoder_key: str, encoder_key: str) -> int | None:
    """The decoder's own size where it differs from the encoder's (None: the same)."""
    return None if cfg[decoder_key] == cfg[encoder_key] else cfg[decoder_key]


def decode_config_from_marian(cfg: dict, generation: dict) -> DecodeConfig:
    """Generation defaults: generation_config.json, else the legacy keys of config.json, else HF's.

    HF's max_length counts the start token, so at most max_length - 1 tokens are generated; its
    length penalty divides a hypothesis's log-probability by |Y|^alpha ("power"). No bound relative
    to the input length applies (extra_len is set so that it never binds).
    """

    def get(key: str, default):
        value = generation.get(key, cfg.get(key))
        return default if value is None else value

    banned = {tuple(ids) for ids in get("bad_words_ids", [])} - {
        (cfg["pad_token_id"],),
        (cfg["decoder_start_token_id"],),
    }
    if banned:  # aiayn's search bans <pad> and the start token only
        warnings.warn(f"generation setting bad_words_ids {sorted(banned)} is not applied by aiayn's search")
    max_length = int(get("max_length", 20))
    # generation_config.json leaves out what is unset, so there an absent key means None, not config.json's.
    forced = generation.get("forced_eos_token_id") if generation else cfg.get("forced_eos_token_id")
    return DecodeConfig(
        beam_size=int(get("num_beams", 1)),
        alpha=float(get("length_penalty", 1.0)),
        length_penalty="power",
        max_len=max_length - 1,
        extra_len=max_length,
        forced_eos=forced == cfg["eos_token_id"],
    )


def read_weights(directory: str | Path, read: Reader = read_safetensors) -> dict[str, Tensor]:
    """model.safetensors (also sharded) through `read`, else pytorch_model.bin loaded with weights_only
    (no pickled code; read as it is stored)."""
    directory = Path(directory)
    if (directory / SAFETENSORS).is_file():
        return read(directory / SAFETENSORS)
    if (directory / SAFETENSORS_INDEX).is_file():
        files = sorted(set(read_json(directory / SAFETENSORS_INDEX)["weight_map"].values()))
        return {k: v for f in files for k, v in read(directory / f).items()}
    if (directory / TORCH_BIN).is_file():
        weights = load_plain_pickle(directory / TORCH_BIN, "a state dict")
        if not isinstance(weights, dict):
            raise ValueError(f"{directory / TORCH_BIN}: expected a state dict of tensors")
        return weights
    raise FileNotFoundError(f"{directory}: no {SAFETENSORS} or {TORCH_BIN}; not a Marian model directory")


def _rename(name: str) -> str:
    for old, new in MARIAN_RENAMES:
        name = name.replace(old, new)
    return name


def state_dict_from_marian(weights: dict[str, Tensor], model: Transformer, where: str = "weights") -> dict[str, Tensor]:
    """Hugging Face Marian names and tensors -> a state dict for model, checked name by name and shape by shape."""
    config = model.config
    hf = {k.removeprefix("model."): v.float() for k, v in weights.items()}
    embed = hf.get("shared.weight", hf.get("encoder.embed_tokens.weight"))
    if embed is None:
        raise ValueError(f"{where}: no token embedding (model.shared.weight or model.encoder.embed_tokens.weight)")
    out = {"encoder.embed.weight": embed}
    if config.share_embeddings:
        out["decoder.embed.weight"] = embed
    else:
        out["decoder.embed.weight"] = hf.get("decoder.embed_tokens.weight")
    if not config.tie_output:
        out["output_proj.weight"] = hf.get("lm_head.weight")
    bias = hf.get("final_logits_bias")
    out["logits_bias"] = bias.reshape(-1) if bias is not None else torch.zeros(config.target_vocab_size)
    unknown = []
    for name, tensor in hf.items():
        if name.startswith(("encoder.layers.", "decoder.layers.")):
            out[_rename(name)] = tensor
        elif name.endswith("embed_positions.weight"):
            check_positions(tensor, config, f"{where}: {name}")
        elif name not in EMBEDDINGS:
            unknown.append(name)
    if unknown:  # nothing is dropped silently: e.g. a variant with extra layer norms
        raise ValueError(f"{where}: tensors aiayn's Marian model has no place for: {', '.join(sorted(unknown)[:5])}")
    check_state(out, model.state_dict(), where)
    return out


def check_positions(table: Tensor, config: ModelConfig, where: str) -> None:
    """A stored position table must be the [sin | cos] table aiayn computes (it is not loaded)."""
    ours = sinusoid_table(config.max_len, config.d_model, "halves")
    if table.shape != ours.shape or (table - ours).abs().max().item() > 1e-4:
        raise ValueError(f"{where}: the stored positional table is not Marian's [sin | cos] sinusoid table")


def load_marian(
    directory: str | Path, device: str | torch.device = "cpu", read: Reader = read_safetensors
) -> tuple[Transformer, MarianTokenizer, DecodeConfig]:
    """A Hugging Face Marian directory as (aiayn Transformer in eval mode, tokenizer, generation defaults)."""
    directory = Path(directory)
    cfg = read_marian_config(directory)
    tokenizer = MarianTokenizer.load(directory)
    _check_vocab(tokenizer, model_config_from_marian(cfg, unk_id=tokenizer.unk_id), directory)
    model = load_marian_model(directory, device, tokenizer.unk_id, read)
    generation = read_json(directory / GENERATION_CONFIG) if (directory / GENERATION_CONFIG).is_file() else {}
    return model, tokenizer, decode_config_from_marian(cfg, generation)


def load_marian_model(
    directory: str | Path, device: str | torch.device = "cpu", unk_id: int = 1, read: Reader = read_safetensors
) -> Transformer:
    """The model of a Marian directory alone (no tokenizer needed), in eval mode; unk_id: the tokenizer's."""
    config = model_config_from_marian(read_marian_config(directory), unk_id=unk_id)
    with torch.device("meta"):  # names and shapes only: the checkpoint's tensors become the weights
        skeleton = Transformer(config)
    weights = read_weights(directory, read)
    model = Transformer.from_state_dict(config, state_dict_from_marian(weights, skeleton, str(directory)))
    return model.to(device).eval()


def _check_vocab(tokenizer: MarianTokenizer, config: ModelConfig, directory: Path) -> None:
    """vocab.json must index the embedding rows, and its special ids must be config.json's."""
    for table, rows, name in (
        (tokenizer.vocab, config.vocab_size, VOCAB),
        (tokenizer.target_vocab, config.target_vocab_size, "target vocabulary"),
    ):
        if len(table) != rows or max(table.values()) >= rows:
            raise ValueError(
                f"{directory}: {name} has {len(table)} pieces (largest id {max(table.values())}) but "
                f"the model's vocabulary size is {rows}: vocabulary size does not match the weights"
            )
    # Source padding is masked by config's pad id, and targets end with config's eos id.
    for side, pad, eos in (
        ("source", tokenizer.pad_id, config.eos_id),
        ("target", tokenizer.target_pad_id, tokenizer.target_eos_id),
    ):
        if (pad, eos) != (config.pad_id, config.eos_id):
            raise ValueError(
                f"{directory}: the {side} vocabulary has <pad> {pad} and </s> {eos}, but config.json "
                f"pad_token_id {config.pad_id} and eos_token_id {config.eos_id}"
            )
