"""Every number of the report, gathered topic by topic from the lab's modules into one dictionary."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import ModelConfig
from ..model import Transformer
from . import anatomy, cost, details, forcing, heads, lengths, paths, positions, recurrence, rows, softmax, variations

Log = Callable[[str], None]
D_KS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
DISTANCES = [2, 10, 50, 200]


def languages(model: Transformer) -> tuple[str, str]:
    """The model's source and target languages (en-de where the configuration does not say)."""
    return getattr(model.config, "src_lang", None) or "en", getattr(model.config, "tgt_lang", None) or "de"


def theory(quick: bool) -> dict[str, Any]:
    """Items 2-5 and 7: the numbers that need no trained model."""
    lengths = (16, 32, 64) if quick else (16, 64, 256, 1024)
    kernels = {"convolutional": 3, "dilated": 2}
    path_table = {kind: [paths.path_length(kind, d, k=kernels.get(kind, 3)) for d in DISTANCES] for kind in paths.KINDS}
    exact = {
        kind: [paths.exact_path_length(kind, d, k=kernels.get(kind, 3)) for d in DISTANCES] for kind in paths.KINDS
    }
    n_grid = np.array([16, 32, 64, 128, 256, 512, 1024, 2048])
    return {
        "trace": recurrence.scalar_trace(),
        "agreement": recurrence.agreement()._asdict(),
        "change": recurrence.change_one_word(),
        "lengths": np.array(lengths),
        "timings": recurrence.timings(lengths, repeats=2 if quick else 5),
        "distances": DISTANCES,
        "path_lengths": path_table,
        "path_exact": exact,
        "sequential": {kind: paths.sequential_operations(kind, 100) for kind in paths.KINDS},
        "flops_n": n_grid,
        "layer_flops": paths.layer_flops(n_grid, 512),
        "whole_layers": {
            "lengths": n_grid,
            "flops": [paths.whole_layer_flops(int(n), 512, 2048) for n in n_grid],
            "cheaper_than": {k: paths.cheaper_below(k, 512, 2048, [int(n) for n in n_grid]) for k in ("gru", "lstm")},
        },
        "d_ks": np.array(D_KS),
        "variance": softmax.dot_product_variance(D_KS, samples=5000 if quick else 20000),
        "saturation": softmax.saturation(D_KS, samples=200 if quick else 1000),
        "widget": {s: softmax.attention_weights(softmax.scaling_scores(2.0, 64), 64, s) for s in (True, False)},
        "pe": positions.encoding(100, 128),
        "wavelengths": positions.wavelengths(512),
        "pe_linearity": max(positions.linearity_error(k, 512, length=200) for k in (1, 5, 10, 50)),
        "lr": details.learning_rate_curve(),
        "additive": details.additive_vs_dot(repeats=3 if quick else 10),
        "gradients": recurrence.gradient_by_distance(),
        "earlier_models": cost.against_earlier_models(),
        "table3_counts": variations.table3_counts(),
        "table3_has_d_k": variations.has_d_k_field(),
    }


def on_model(model: Transformer, tokenizer: Any, sentence: str, layer: int | None) -> dict[str, Any]:
    """Items 1, 6, 8 and 12 on the trained model."""
    one = anatomy.translate_one(model, tokenizer, sentence)
    src = anatomy.source_ids(tokenizer, sentence)
    tgt_in = torch.tensor([[model.config.bos_id] + one["output_ids"][:-1]])
    src_lang, tgt_lang = languages(model)
    return {
        "one": one,
        "heads": heads.where_it_looks(
            model,
            tokenizer,
            sentence,
            one["output_ids"],
            heads.PRONOUNS.get(src_lang, ("it",)),
            layer,
            heads.PRONOUNS.get(tgt_lang, ()),
        ),
        "forcing": forcing.teacher_forcing(model, src),
        "loss": forcing.loss_by_hand(model, src, one["output_ids"]),
        "shared": details.shared_matrix(model),
        "masked": details.masked_weights(model, src, tgt_in),
        "ffn": details.ffn_as_convolutions(model),
        "equivariance": details.permutation_equivariance(model, src),
        "appendix": heads.appendix_attention(model, tokenizer, layer) if src_lang.startswith("en") else None,
    }


MASK_PAIRS, MASK_STEPS = 29_000, 1500


def mask_experiment(
    tokenizer: Any, train: tuple[list[str], list[str]], valid: tuple[list[str], list[str]]
) -> dict[str, Any]:
    """Item 8's last claim: a tiny model of the same kind trained with and without the causal mask on the training
    pairs (enough of them that the masked model generalises rather than memorises), scored on validation pairs."""

    def encoded(texts: tuple[list[str], list[str]], n: int) -> list[tuple[list[int], list[int]]]:
        pairs = zip(tokenizer.encode_source(texts[0][:n]), tokenizer.encode_target(texts[1][:n]))
        return [(s, t) for s, t in pairs if len(s) <= 40 and len(t) <= 40]

    config = ModelConfig.preset("tiny", vocab_size=len(tokenizer), p_drop=0.0, max_len=128)
    return forcing.mask_experiment(config, encoded(train, MASK_PAIRS), encoded(valid, 40), steps=MASK_STEPS)


BASE_37K = ModelConfig.preset("base", vocab_size=37_000)  # the paper's base model and shared vocabulary (§5.1)


def sentence_lengths(tokenizer: Any, prefix: Path, langs: tuple[str, str], limit: int = 20_000) -> list[int] | None:
    """The source lengths in pieces of the first `limit` pairs of a parallel text (None where it is not here)."""
    from ..data.sources import Source

    source = Source(prefix, *langs)
    try:
        source.files()
    except FileNotFoundError:
        return None
    first = next(iter(source.chunks(size=limit)), None)  # one chunk: the first `limit` pairs
    return [len(ids) for ids in tokenizer.encode_source(first.src if first else [])]


def run_cost(results: dict[str, Any] | None, rate: float) -> dict[str, Any]:
    """Item 9: the paper's two models counted both ways, and this machine's run."""
    models = {}
    for name in ("base", "big"):
        counted = cost.counted_flops(ModelConfig.preset(name), cost.PAPER_STEPS[name])
        estimated = cost.paper_flops(cost.PAPER_HOURS[name])
        models[name] = {"estimated": estimated, "counted": counted, "utilisation": cost.utilisation(counted, estimated)}
    out: dict[str, Any] = {"models": models, "machine_rate": rate}
    counted = (results or {}).get("matmul_flops", (results or {}).get("train_flops"))  # the older name of the figure
    if results and results.get("minutes") and counted:
        seconds = results.get("device_seconds", results["minutes"] * 60)
        out["run"] = {
            "minutes": results["minutes"],
            "steps": results.get("steps"),
            "counted": counted,
            "estimated": seconds * rate,
            "tokens": results.get("tokens"),
        }
    return out


def measure_all(
    model_dir: Path,
    run_dir: Path | None,
    results: dict[str, Any] | None,
    quick: bool,
    layer: int | None,
    log: Log,
    table3: Path | None = None,
) -> dict[str, Any]:
    """Everything the report shows; run_dir holds checkpoints (for averaging) when the lab trained the model;
    table3, a Table 3 run's folder, gives claims 13.5-13.7 (lab/rows.py)."""
    from ..data.sources import Source
    from ..model_folder import load_any
    from .trained import REPO

    began = time.perf_counter()
    m: dict[str, Any] = {"quick": quick, "model_dir": str(model_dir)}
    log("theory: recurrence, paths, softmax, positions ...")
    m.update(theory(quick))
    model, tokenizer, _ = load_any(model_dir)
    model.eval()
    src_lang, tgt_lang = languages(model)
    m["languages"] = (src_lang, tgt_lang)
    sentence = heads.SENTENCES.get(src_lang, heads.SENTENCES["en"])
    log("the trained model: translation, heads, teacher forcing, small claims ...")
    m.update(on_model(model, tokenizer, sentence, layer))
    multi30k = REPO.parent / "shared" / "data" / "multi30k"
    valid = Source(multi30k / "val", src_lang, tgt_lang).read()
    first = next(i for i, t in enumerate(tokenizer.encode_target(valid[1][:20])) if len(t) >= 4)
    pair = tokenizer.encode_source(valid[0][first : first + 1])[0], tokenizer.encode_target([valid[1][first]])[0]
    m["shift"] = {**forcing.shift_right(model, *pair), "source_text": valid[0][first], "target_text": valid[1][first]}
    m["shift"]["pieces"] = anatomy.pieces(tokenizer, m["shift"]["decoder_input"] + pair[1][-1:])
    m["sentence_lengths"] = {
        name: sentence_lengths(tokenizer, prefix, (src_lang, tgt_lang), limit=2_000 if quick else 20_000)
        for name, prefix in (("Multi30k", multi30k / "train"), ("WMT 2014", REPO / "../data/wmt14-en-de/train"))
    }
    log("memory of a training step against the batch ...")
    m["memory"] = {
        "this model": lengths.training_memory(model.config, [2, 4] if quick else [4, 8, 16]),
        "base, 37,000 pieces": None if quick else lengths.training_memory(BASE_37K, [2, 4, 8]),
    }
    if not quick:  # training runs: too long for --quick
        log("training a tiny model with and without the causal mask ...")
        train = Source(multi30k / "train", src_lang, tgt_lang).read()
        m["mask"] = mask_experiment(tokenizer, train, valid)
    if run_dir is not None:
        log("the averaged checkpoint against the last one ...")
        n = 100 if quick else 300
        m["averaging"] = details.averaged_vs_last(run_dir, valid[0][:n], valid[1][:n])
    if table3 is not None:
        log(f"Table 3's rows in {table3}: label smoothing, one head, positions past the training lengths ...")
        m["rows"] = rows.measure(table3)
    m["cost"] = run_cost(results, cost.machine_rate())
    m["results"] = {k: v for k, v in (results or {}).items() if isinstance(v, (int, float, str))}
    m["seconds"] = time.perf_counter() - began
    return m
