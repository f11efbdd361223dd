"""The claims table: each checkable claim, its source, the criterion, what was measured, and the verdict."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import paths


class Claim(NamedTuple):
    id: str  # item.number, as the report numbers them
    claim: str
    source: str  # the paper's section or table
    criterion: str
    measured: str
    holds: bool | None  # None: not measured in this run
    by_construction: bool  # true of the arithmetic whatever the model (a test checks these hold)
    words: str = ""  # the paper's own words for the claim (PAPER_WORDS), at most a line


# What the paper says, claim by claim: the sentence each criterion is held to.
PAPER_WORDS = {
    "2.1": "§1: they generate a sequence of hidden states h_t, as a function of the previous hidden state h_(t-1) and the "
    "input for position t",
    "3.1": "§1: recurrent models factor computation along the symbol positions of the input and output",
    "3.2": "§3.2.1, eq. 1: Attention(Q, K, V) = softmax(QK^T / sqrt(d_k)) V",
    "3.3": "§3.2.1: we compute the attention function on a set of queries simultaneously, packed together into a "
    "matrix Q",
    "3.4": "§1: this inherently sequential nature precludes parallelization within training examples",
    "3.5": "§4: in terms of computational complexity, self-attention layers are faster than recurrent layers when the "
    "sequence length n is smaller than the representation dimensionality d",
    "4.1": "§4: the shorter these paths ..., the easier it is to learn long-range dependencies",
    "4.2": "§4: constant number of sequentially executed operations, whereas a recurrent layer requires O(n)",
    "4.3": "§4, Table 1: complexity per layer O(n^2 d) self-attention, O(n d^2) recurrent",
    "5.1": "§3.2.1, footnote 4: q . k = sum q_i k_i has mean 0 and variance d_k",
    "5.2": "§3.2.1: for large d_k ... pushing the softmax function into regions where it has extremely small gradients",
    "5.3": "§3.2.1: to counteract this effect, we scale the dot products by 1/sqrt(d_k)",
    "7.1": "§3.5: the wavelengths form a geometric progression from 2 pi to 10000 * 2 pi",
    "7.2": "§3.5: for any fixed offset k, PE_(pos+k) can be represented as a linear function of PE_pos",
    "8.1": "§3.1: the predictions for position i can depend only on the known outputs at positions less than i",
    "8.2": "§5.4: during training, we employed label smoothing of value eps_ls = 0.1",
    "8.3": "§3.2.3: we need to prevent leftward information flow in the decoder to preserve the auto-regressive property",
    "12.1": "§3.4: we share the same weight matrix ...; in the embedding layers, we multiply those weights by sqrt(d_model)",
    "12.2": "§3.2.3: masking out (setting to -inf) all values in the input of the softmax which correspond to illegal "
    "connections",
    "12.3": "§3.3: another way of describing this is as two convolutions with kernel size 1",
    "12.4": "§3.5: since our model contains no recurrence and no convolution, ... we must inject some information "
    "about the relative or absolute position of the tokens in the sequence",
    "12.5": "§5.3: increasing the learning rate linearly for the first warmup_steps ..., warmup_steps = 4000",
    "12.6": "§3.2.1: dot-product attention is much faster and more space-efficient in practice",
    "12.7": "§6.1: for the base models, we used a single model obtained by averaging the last 5 checkpoints",
    "13.1": "§4: the length of the paths forward and backward signals have to traverse in the network",
    "13.2": "§3.1: the output embeddings are offset by one position",
    "13.3": "the overview (not the paper): both Transformer models achieve higher BLEU scores with orders of magnitude "
    "less training compute",
    "13.4": "§5.1: each training batch contained a set of sentence pairs containing approximately 25000 source "
    "tokens and 25000 target tokens",
    "13.5": "§5.4: this hurts perplexity, as the model learns to be more unsure, but improves accuracy and BLEU score",
    "13.6": "§3.2.2: with a single attention head, averaging inhibits this",
    "13.7": "§3.5: it may allow the model to extrapolate to sequence lengths longer than the ones encountered during "
    "training",
}


def _trace(m: dict[str, Any]) -> list[Claim]:
    t = m["trace"]
    ratio = t[1:] / t[:-1]
    return [
        Claim(
            "2.1",
            "The trace of word 1 in h_t = tanh(0.5 h_(t-1) + x_t) halves at each step",
            "§1",
            "h = 0.7616, 0.3634, ... (4 decimals) and h_6 / h_5 within 0.01 of 0.5",
            ", ".join(f"{v:.4f}" for v in t) + f"; last ratio {ratio[-1]:.4f}",
            bool(f"{t[0]:.4f}" == "0.7616" and f"{t[1]:.4f}" == "0.3634" and abs(ratio[-1] - 0.5) < 0.01),
            True,
        )
    ]


def _recurrence(m: dict[str, Any]) -> list[Claim]:
    a, ch, tm, n = m["agreement"], m["change"], m["timings"], m["lengths"]
    faster = tm["mha"] < tm["gru"]
    return [
        Claim(
            "3.1",
            "A hand-written recurrent loop is the library's layer (nn.RNN, nn.GRU)",
            "§1",
            "max difference < 1e-5",
            f"RNN {a['rnn_vs_library']:.1e}, GRU {a['gru_vs_library']:.1e}",
            max(a["rnn_vs_library"], a["gru_vs_library"]) < 1e-5,
            True,
        ),
        Claim(
            "3.2",
            "Eq. 1 by hand is F.scaled_dot_product_attention",
            "§3.2.1, eq. 1",
            "max difference < 1e-5",
            f"{a['attention_vs_sdpa']:.1e}",
            a["attention_vs_sdpa"] < 1e-5,
            True,
        ),
        Claim(
            "3.3",
            "Row 7 of attention computed alone equals row 7 of the full product",
            "§1, §4",
            "max difference < 1e-6",
            f"{a['row7_alone']:.1e}",
            a["row7_alone"] < 1e-6,
            True,
        ),
        Claim(
            "3.4",
            "Changing word 3 moves every attention output but only the recurrent states from step 3 on",
            "§1",
            "RNN outputs 0-2 move by exactly 0, outputs 3+ and all attention outputs move",
            f"RNN {' '.join(f'{v:.3f}' for v in ch['rnn'][:6])} ...; attention min {ch['attention'].min():.4f}",
            bool((ch["rnn"][:3] == 0).all() and (ch["rnn"][3:] > 0).all() and (ch["attention"] > 0).all()),
            True,
        ),
        Claim(
            "3.5",
            "A self-attention layer is faster than a recurrent (GRU) layer of the same width when n < d (the paper says "
            "it of the FLOPs, 4.3; timed here)",
            "§1, §4",
            f"nn.MultiheadAttention faster than nn.GRU at every n < d = {WIDTH} measured "
            f"({', '.join(str(v) for v in n if v < WIDTH)}); n >= d is where §4 expects the crossover",
            ", ".join(f"n={v}: {ratio(g, a_)}" for v, g, a_ in zip(n, tm["gru"], tm["mha"])) + " (GRU / attention)",
            bool(faster[n < WIDTH].all()) if (n < WIDTH).any() else None,
            False,
        ),
    ]


WIDTH = 512  # the width of the timed layers (recurrence.timings) and of the FLOP counts: the paper's d_model


def ratio(slow: float, fast: float) -> str:
    """slow / fast as the report prints it everywhere (one figure, one value)."""
    return f"{slow / fast:.2f}x"


def _paths(m: dict[str, Any]) -> list[Claim]:
    measured, exact, d = m["path_lengths"], m["path_exact"], m["distances"]
    seq = m["sequential"]
    fl, n = m["layer_flops"], m["flops_n"]
    cheaper = n[fl["self-attention"] < fl["recurrent"]]
    return [
        Claim(
            "4.1",
            "Path lengths: self-attention O(1), recurrent O(n), convolution O(n/k), dilated O(log_k n), "
            "restricted O(n/r)",
            "§4, Table 1",
            "measured on the dependency graph = the exact counts (1, d, ceil(d/(k-1)), ceil(log_k(d+1)), ceil(d/r))",
            "at d = " + f"{d[-1]}: " + ", ".join(f"{k} {v[-1]}" for k, v in measured.items()),
            measured == exact,
            True,
        ),
        Claim(
            "4.2",
            "Sequential operations: O(n) for a recurrent layer, O(1) for the others",
            "§4, Table 1",
            "longest chain inside one layer of 100 positions: 100 and 1",
            ", ".join(f"{k} {v}" for k, v in seq.items()),
            seq["recurrent"] == 100 and all(v == 1 for k, v in seq.items() if k != "recurrent"),
            True,
        ),
        Claim(
            "4.3",
            "Self-attention is cheaper than a recurrent layer when n < d",
            "§4",
            "FLOPs counted (Table 1's terms, n^2 d against n d^2): attention below recurrent exactly for n < d = 512",
            f"attention cheaper at n = {', '.join(map(str, cheaper))}; {_whole_layers(m)}; {_real_lengths(m)}",
            bool(list(cheaper) == [v for v in n if v < WIDTH]),
            True,
        ),
    ]


def _whole_layers(m: dict[str, Any]) -> str:
    """What the whole layers cost: the attention sub-layer with its projections against GRU and LSTM layers."""
    w = m.get("whole_layers")
    if not w:
        return "whole layers not counted"
    lengths, below = [int(v) for v in w["lengths"]], w["cheaper_than"]
    ffn = w["flops"][0]["ffn"] / w["flops"][0]["lstm"]
    return (
        f"whole layers, projections counted: attention sub-layer cheaper than a GRU layer at n = "
        f"{', '.join(map(str, below['gru'])) or 'none'}, than an LSTM layer at n = "
        f"{', '.join(map(str, below['lstm'])) or 'none'} (of {', '.join(map(str, lengths))}), never than a tanh "
        f"RNN layer; the FFN (d_ff = 4d) alone costs {ffn:.2f} times an LSTM layer"
    )


def _real_lengths(m: dict[str, Any]) -> str:
    """The share of real sentences with n < d (in the model's pieces), where the texts' lengths are here."""
    parts = []
    for name, lengths in (m.get("sentence_lengths") or {}).items():
        if lengths:
            share = paths.share_shorter(lengths, WIDTH)
            parts.append(f"{share:.1%} of {len(lengths):,} {name} sentences have n < {WIDTH} (longest {max(lengths)})")
        else:
            parts.append(f"{name}: its data is not here")
    return "; ".join(parts) or "no sentence lengths measured"


def _softmax(m: dict[str, Any]) -> list[Claim]:
    d_k, var, s = m["d_ks"], m["variance"], m["saturation"]
    rel = np.abs(var / d_k - 1)
    big = s["max_weight_scaled"][d_k >= 16]
    at64 = int(np.flatnonzero(d_k == 64)[0])
    return [
        Claim(
            "5.1",
            "q . k of unit-variance components has variance d_k",
            "§3.2.1, footnote 4",
            "measured variance within 10% of d_k for d_k = 1 .. 1,024",
            f"largest relative error {rel.max():.1%}",
            bool(rel.max() < 0.1),
            True,
        ),
        Claim(
            "5.2",
            "Without 1/sqrt(d_k) the softmax saturates at large d_k, its gradient vanishes",
            "§3.2.1",
            "unscaled, at the paper's d_k = 64: mean largest weight > 0.8 (scaled: about 0.32), gradient under 0.6 "
            "of the scaled one; at d_k = 1,024: > 0.9 and under a fifth",
            "; ".join(
                f"d_k = {d_k[i]}: largest weight {s['max_weight_unscaled'][i]:.3f}, gradient "
                f"{s['gradient_unscaled'][i]:.4f} against {s['gradient_scaled'][i]:.4f} scaled"
                for i in (at64, -1)
            ),
            bool(
                s["max_weight_unscaled"][at64] > 0.8
                and s["gradient_unscaled"][at64] < 0.6 * s["gradient_scaled"][at64]
                and s["max_weight_unscaled"][-1] > 0.9
                and s["gradient_unscaled"][-1] < 0.2 * s["gradient_scaled"][-1]
            ),
            True,
        ),
        Claim(
            "5.3",
            "With 1/sqrt(d_k) the weights do not depend on d_k",
            "§3.2.1",
            "scaled mean largest weight varies by < 0.05 over d_k = 16 .. 1,024 (below 16, q . k is far from normal)",
            f"{big.min():.3f} .. {big.max():.3f} (d_k = 1: {s['max_weight_scaled'][0]:.3f})",
            bool(np.ptp(big) < 0.05),
            True,
        ),
    ]


def _positions(m: dict[str, Any]) -> list[Claim]:
    w = m["wavelengths"]
    return [
        Claim(
            "7.1",
            "Wavelengths form a geometric progression from 2 pi toward 10000 * 2 pi",
            "§3.5",
            "first 2 pi, last about 60,611 at d_model 512, constant ratio",
            f"{w[0]:.4f} .. {w[-1]:,.0f}, ratio {w[1] / w[0]:.5f}",
            bool(abs(w[0] - 2 * np.pi) < 1e-9 and round(w[-1]) == 60611 and np.allclose(w[1:] / w[:-1], w[1] / w[0])),
            True,
        ),
        Claim(
            "7.2",
            "PE(pos+k) is a linear function of PE(pos), one M_k for every pos",
            "§3.5",
            "largest |M_k PE(pos) - PE(pos+k)| < 1e-5 (k = 1, 5, 10, 50; pos < 200)",
            f"{m['pe_linearity']:.1e}",
            m["pe_linearity"] < 1e-5,
            True,
        ),
    ]


def _forcing(m: dict[str, Any]) -> list[Claim]:
    f, loss = m["forcing"], m["loss"]
    return [
        Claim(
            "8.1",
            "Teacher forcing computes exactly what step-by-step generation computes",
            "§3.1, §5",
            "max |teacher-forced logits - generation logits| < 1e-5, same tokens",
            f"{f['max_difference']:.1e} over {f['calls']} positions; same tokens: {f['same_tokens']}; "
            f"1 call {f['forcing_ms']:.1f} ms against {f['calls']} calls {f['generation_ms']:.0f} ms",
            bool(f["max_difference"] < 1e-5 and f["same_tokens"]),
            True,
        ),
        Claim(
            "8.2",
            "The cross-entropy by hand, without and with label smoothing, is PyTorch's",
            "§5.4",
            f"difference < 1e-5 from F.cross_entropy, label_smoothing 0 and {loss['epsilon']}, and from aiayn's "
            "training loss at 0",
            f"{loss['loss_by_hand']:.4f} by hand, {loss['loss_library']:.4f} F.cross_entropy, {loss['loss_aiayn']:.4f} "
            f"aiayn's; smoothed {loss['smoothed_by_hand']:.4f} and {loss['smoothed_library']:.4f}",
            abs(loss["loss_by_hand"] - loss["loss_library"]) < 1e-5
            and abs(loss["loss_by_hand"] - loss["loss_aiayn"]) < 1e-5
            and abs(loss["smoothed_by_hand"] - loss["smoothed_library"]) < 1e-5,
            True,
        ),
        _mask_claim(m.get("mask")),
    ]


def _mask_claim(mask: dict[str, Any] | None) -> Claim:
    claim = "Without the causal mask the model copies its input: its loss collapses to about 0, then generation fails"
    criterion = (
        "unmasked: training loss (last 10 steps) collapses, under a tenth of the masked model's, and its greedy "
        "generation on 40 held-out pairs at least 10 points of token accuracy below the masked model's"
    )
    if mask is None:
        return Claim("8.3", claim, "§3.2.3", criterion, "not measured with --quick (two training runs)", None, False)
    final = {name: float(mask[f"{name}_loss"][-10:].mean()) for name in ("masked", "unmasked")}
    return Claim(
        "8.3",
        claim,
        "§3.2.3",
        criterion,
        f"training loss {final['unmasked']:.3f} unmasked, {final['masked']:.3f} masked; held-out loss "
        f"{mask['unmasked_held_out_loss']:.2f} unmasked, {mask['masked_held_out_loss']:.2f} masked; generation "
        f"accuracy {mask['unmasked_accuracy']:.0%} unmasked, {mask['masked_accuracy']:.0%} masked",
        bool(final["unmasked"] < 0.1 * final["masked"] and mask["unmasked_accuracy"] < mask["masked_accuracy"] - 0.1),
        False,
    )


def _details(m: dict[str, Any]) -> list[Claim]:
    lr, sh, eq, add = m["lr"], m["shared"], m["equivariance"], m["additive"]
    out = [
        Claim(
            "12.1",
            "One matrix is both embeddings and the pre-softmax projection; the embeddings multiply it by sqrt(d_model)",
            "§3.4",
            "same storage; projection = h E^T exactly; embedding = E[token] x sqrt(d_model) within 1e-6",
            f"shared: {sh['embeddings_shared']}; projection error {sh['projection_error']:.1e}, scale error "
            f"{sh['scale_error']:.1e}",
            bool(sh["embeddings_shared"] and sh["projection_error"] == 0 and sh["scale_error"] < 1e-6),
            True,
        ),
        Claim(
            "12.2",
            "Masked attention weights are exactly 0",
            "§3.2.3",
            "largest weight on a later position == 0",
            f"{m['masked']:.1e}",
            m["masked"] == 0.0,
            True,
        ),
        Claim(
            "12.3",
            "The FFN is two convolutions of kernel size 1",
            "§3.3",
            "max difference < 1e-5 of the largest output",
            f"{m['ffn']:.1e}",
            m["ffn"] < 1e-5,
            True,
        ),
        Claim(
            "12.4",
            "Without positions the encoder is permutation-equivariant",
            "§3.5",
            "error < 1e-5 without positions, > 1e-3 with them",
            f"{eq['without_positions']:.1e} without, {eq['with_positions']:.1e} with",
            bool(eq["without_positions"] < 1e-5 and eq["with_positions"] > 1e-3),
            True,
        ),
        Claim(
            "12.5",
            "Eq. 3 rises for 4,000 steps, then decays; peak about 7.0e-4 (base)",
            "§5.3, eq. 3",
            "peak at step 4,000, value 7.0e-4 to 2 digits",
            f"peak {lr['peak_rate']:.3e} at step {lr['peak_step']:,}",
            bool(lr["peak_step"] == 4000 and f"{lr['peak_rate']:.1e}" == "7.0e-04"),
            True,
        ),
        Claim(
            "12.6",
            "Dot-product attention is much faster than additive attention",
            "§3.2.1",
            "additive at least 5x slower at d_k = 64, n = 64",
            f"{add['dot_ms']:.2f} ms dot, {add['additive_ms']:.2f} ms additive ({add['ratio']:.0f}x)",
            add["ratio"] >= 5,
            False,
        ),
    ]
    avg = m.get("averaging")
    claim = "A model averaged from the last checkpoints, the paper's practice, translates no worse than the last one"
    criterion = "BLEU(averaged) not below BLEU(last) at p < 0.05 (sacreBLEU's paired bootstrap, 1,000 samples)"
    if avg:
        worse = avg["averaged"] < avg["last"] and avg["p_value"] < 0.05
        out.append(
            Claim(
                "12.7",
                claim,
                "§6.1",
                criterion,
                f"{avg['averaged']:.2f} +- {avg['ci95']:.2f} (95%) averaged ({len(avg['checkpoints'])} checkpoints), "
                f"{avg['last']:.2f} last; difference {avg['averaged'] - avg['last']:+.2f}, p = {avg['p_value']:.3f}",
                not worse,
                False,
            )
        )
    else:
        out.append(
            Claim("12.7", claim, "§6.1", criterion, "not measured: --model has no checkpoints here", None, False)
        )
    return out


def _texts(m: dict[str, Any]) -> list[Claim]:
    """Item 13: what the explanatory texts add to the paper, measured."""
    g, shift, rows = m["gradients"], m.get("shift"), m["earlier_models"]
    far = 40
    attention = g["attention"][1:]
    claims = [
        Claim(
            "13.1",
            "A recurrent layer's gradient fades with distance; attention's path has length 1 at any distance",
            "§4 (the texts: vanishing gradients)",
            f"|d y_n / d x_(n-k)| at k = {far} under 1e-6 of k = 1 for a tanh RNN and a GRU (PyTorch's initial "
            "weights); attention's within 10x of its median at every k >= 1",
            ", ".join(f"{name} {g[name][1]:.1e} at k = 1, {g[name][far]:.1e} at k = {far}" for name in ("rnn", "gru"))
            + f"; attention {attention.min():.1e} .. {attention.max():.1e}",
            bool(
                all(g[name][far] < 1e-6 * g[name][1] for name in ("rnn", "gru"))
                and attention.max() < 10 * np.median(attention)
                and attention.min() > np.median(attention) / 10
            ),
            False,
        )
    ]
    if shift is not None:
        claims.append(
            Claim(
                "13.2",
                "The decoder reads the target shifted right, so predicting position i reads only targets < i",
                "§3.1 (the walkthrough: shift_tokens_right)",
                "decoder input = <s> + target[:-1]; a change of target j moves no logit at positions <= j (< 1e-6) "
                "and every one after",
                f"a {len(shift['target'])}-piece validation target, token {shift['changed']} changed: positions <= "
                f"{shift['changed']} moved {shift['earlier']:.1e} at most, later ones {shift['later']:.1e} at least",
                bool(shift["earlier"] < 1e-6 and shift["later"] > 0),
                True,
            )
        )
    cheaper = [min(r["flops_over_base"], r["flops_over_big"]) for r in rows]
    better = [min(r["base_bleu_gain"], r["big_bleu_gain"]) for r in rows]
    claims.append(
        Claim(
            "13.3",
            "Both Transformers reach higher BLEU with orders of magnitude less training compute (the overview)",
            "Table 2",
            "against every earlier model of Table 2 with a cost: both Transformers at least 100x cheaper and higher BLEU",
            f"earlier / Transformer FLOPs {min(cheaper):.2f}x to {max(cheaper):.0f}x (the less of base and big); BLEU "
            f"gain of the lesser Transformer {min(better):+.2f} to {max(better):+.2f}",
            bool(min(cheaper) >= 100 and min(better) > 0),
            False,
        )
    )
    return claims + [_memory(m["memory"])]


def _memory(memory: dict[str, Any]) -> Claim:
    m = memory["base, 37,000 pieces"] or memory["this model"]
    name = "the base model (37,000 pieces)" if memory["base, 37,000 pieces"] else "this model"
    paper = m["bytes_per_token"] * 25_000 + m["intercept"]
    return Claim(
        "13.4",
        "Memory limits the batch: what training keeps grows with the batch's tokens and soon outweighs the model",
        "§5.1 (the walkthrough)",
        "saved activations a line in batch tokens (within 1%); at the paper's 25,000 tokens a side more than 10x "
        "the weights, gradients and Adam's moments together",
        f"{name}: {m['bytes_per_token'] / 1e3:,.0f} kB a token (fit within {m['fit_error']:.0e}); at 25,000 "
        f"tokens {paper / 2**30:.1f} GiB of activations against {m['fixed_bytes'] / 2**30:.2f} GiB fixed; this "
        f"machine's {m['ram_bytes'] / 2**30:.0f} GiB holds at most {m['max_tokens']:,.0f} tokens a side "
        "(extrapolated, not allocated)",
        bool(m["fit_error"] < 0.01 and paper > 10 * m["fixed_bytes"]),
        True,
    )


ROWS_MISSING = (
    "not measured: needs a Table 3 run (aiayn paper table3 --out DIR ... --short 20, then --table3 DIR/table3)"
)


def _rows(r: dict[str, Any] | None) -> list[Claim]:
    """Claims 13.5-13.7 on Table 3's trained rows (lab/rows.py); not measured without them."""
    smoothing = (
        "13.5",
        "Label smoothing hurts perplexity but improves BLEU, on the same model and steps",
        "§5.4, Table 3 (D)",
        "eps_ls 0 against the base's 0.1: perplexity lower and BLEU lower, each by more than the base's seed spread",
    )
    one_head = (
        "13.6",
        "One head averages: its attention spreads wider than each of h heads', and it translates worse",
        "§3.2.2, Table 3 (A)",
        "h = 1 against the base's h heads (d_k = d_model / h): BLEU lower by more than the seed spread; mean attention "
        "entropy above the mean of the base's heads, encoder and encoder-decoder attention alike (one seed each; "
        "the direction is judged)",
    )
    extrapolation = (
        "13.7",
        "Sinusoids let a model read longer sentences than it trained on; learned positions do not",
        "§3.5",
        "trained on pairs of at most L pieces: on longer validation pairs, the sinusoids' perplexity lower and BLEU "
        "higher than learned positions', each by more than the base's seed spread",
    )
    if not r:
        return [Claim(*c, ROWS_MISSING, None, False) for c in (smoothing, one_head, extrapolation)]
    rows, tol, out = r["rows"], r["tolerance"], []

    def pm(row: dict[str, Any], key: str) -> str:
        return f"{row[key]:.2f}" + (f" ± {row[key + '_spread'] / 2:.2f}" if row.get("seeds", 1) > 1 else "")

    if "eps_ls=0.0" in rows:
        base, zero = rows["base"], rows["eps_ls=0.0"]
        more = (
            f"; eps_ls 0.2: {pm(rows['eps_ls=0.2'], 'ppl')}, {pm(rows['eps_ls=0.2'], 'bleu')}"
            if "eps_ls=0.2" in rows
            else ""
        )
        holds = zero["ppl"] < base["ppl"] - tol["ppl"] and base["bleu"] - zero["bleu"] > tol["bleu"]
        out.append(
            Claim(
                *smoothing,
                f"perplexity and BLEU: eps_ls 0.1 {pm(base, 'ppl')}, {pm(base, 'bleu')}; eps_ls 0 {pm(zero, 'ppl')}, "
                f"{pm(zero, 'bleu')}{more}; tolerance {tol['ppl']:.2f} ppl, {tol['bleu']:.2f} BLEU",
                bool(holds),
                False,
            )
        )
    else:
        out.append(Claim(*smoothing, ROWS_MISSING, None, False))
    if "entropy" in r:
        e, base, one = r["entropy"], rows["base"], rows["h=1"]
        parts = {name: (float(e["h=1"][name].mean()), float(e["base"][name].mean())) for name in ("encoder", "cross")}
        out.append(
            Claim(
                *one_head,
                f"BLEU h = 1 {pm(one, 'bleu')} against {pm(base, 'bleu')}; mean entropy, nats, h = 1 against the "
                f"base's heads: " + ", ".join(f"{name} {a:.2f} against {b:.2f}" for name, (a, b) in parts.items()),
                bool(base["bleu"] - one["bleu"] > tol["bleu"] and all(a > b for a, b in parts.values())),
                False,
            )
        )
    else:
        out.append(Claim(*one_head, ROWS_MISSING, None, False))
    if "by_length" in r:
        sine, learned = rows["short, sinusoids"], rows["short, learned"]
        out.append(
            Claim(
                *extrapolation,
                f"L = {r['cut']}, {sine['n_long']} longer pairs: sinusoids {sine['ppl_long']:.2f} ppl, "
                f"{sine['bleu_long']:.2f} BLEU; learned {learned['ppl_long']:.2f}, {learned['bleu_long']:.2f} (on "
                f"lengths seen in training: {sine['ppl']:.2f} against {learned['ppl']:.2f} ppl)",
                bool(
                    learned["ppl_long"] - sine["ppl_long"] > tol["ppl"]
                    and sine["bleu_long"] - learned["bleu_long"] > tol["bleu"]
                ),
                False,
            )
        )
    else:
        out.append(Claim(*extrapolation, ROWS_MISSING, None, False))
    return out


def claims_table(m: dict[str, Any]) -> list[Claim]:
    """All claims of items 2-5, 7, 8, 12 and 13, in the report's order, each with the paper's words."""
    claims = _trace(m) + _recurrence(m) + _paths(m) + _softmax(m) + _positions(m) + _forcing(m) + _details(m)
    claims += _texts(m) + _rows(m.get("rows"))
    return [c._replace(words=PAPER_WORDS[c.id]) for c in claims]


def verdict(claim: Claim) -> str:
    return {True: "holds", False: "does not hold", None: "not measured"}[claim.holds]
