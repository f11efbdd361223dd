"""The claims table: each checkable claim, its source, the criterion, what was measured, and the verdict."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class Claim(NamedTuple):
    id: str  # item.number, as the report numbers them
    claim: str
    source: str  # the paper's section or table
    criterion: str
    measured: str
    holds: bool | None  # None: not measured in this run
    by_construction: bool  # true of the arithmetic whatever the model (a test checks these hold)


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
            "A self-attention layer is faster than a recurrent (GRU) layer of the same width",
            "§1, §4",
            f"nn.MultiheadAttention faster than nn.GRU at every n in {', '.join(map(str, n))}",
            ", ".join(f"n={v}: {g / a_:.1f}x" for v, g, a_ in zip(n, tm["gru"], tm["mha"])) + " (GRU / attention)",
            bool(faster.all()),
            False,
        ),
    ]


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
            "FLOPs counted: attention below recurrent exactly for n < d = 512",
            f"attention cheaper at n = {', '.join(map(str, cheaper))}",
            bool(list(cheaper) == [v for v in n if v < 512]),
            True,
        ),
    ]


def _softmax(m: dict[str, Any]) -> list[Claim]:
    d_k, var, s = m["d_ks"], m["variance"], m["saturation"]
    rel = np.abs(var / d_k - 1)
    big = s["max_weight_scaled"][d_k >= 16]
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
            "at d_k = 1,024 unscaled: mean largest weight > 0.9, gradient under a fifth of the scaled one",
            f"largest weight {s['max_weight_unscaled'][-1]:.3f}, gradient {s['gradient_unscaled'][-1]:.4f} "
            f"against {s['gradient_scaled'][-1]:.4f} scaled",
            bool(s["max_weight_unscaled"][-1] > 0.9 and s["gradient_unscaled"][-1] < 0.2 * s["gradient_scaled"][-1]),
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
            "The loss by hand is the library's",
            "§5",
            "difference < 1e-5",
            f"{loss['loss_by_hand']:.4f} by hand, {loss['loss_library']:.4f} library",
            abs(loss["loss_by_hand"] - loss["loss_library"]) < 1e-5,
            True,
        ),
        _mask_claim(m.get("mask")),
    ]


def _mask_claim(mask: dict[str, Any] | None) -> Claim:
    claim = "Without the causal mask the model copies its input: its loss collapses to about 0, then generation fails"
    criterion = (
        "unmasked: training loss (last 10 steps) < 0.1 nats, held-out teacher-forced loss under half the "
        "masked model's, generation accuracy below the masked model's"
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
        bool(
            final["unmasked"] < 0.1
            and mask["unmasked_held_out_loss"] < 0.5 * mask["masked_held_out_loss"]
            and mask["unmasked_accuracy"] < mask["masked_accuracy"]
        ),
        False,
    )


def _details(m: dict[str, Any]) -> list[Claim]:
    lr, sh, eq, add = m["lr"], m["shared"], m["equivariance"], m["additive"]
    out = [
        Claim(
            "12.1",
            "One matrix is both embeddings and the pre-softmax projection",
            "§3.4",
            "same storage; projection = h E^T exactly",
            f"shared: {sh['embeddings_shared']}; error {sh['projection_error']:.1e}",
            bool(sh["embeddings_shared"] and sh["projection_error"] == 0),
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
            "additive slower at d_k = 64, n = 64",
            f"{add['dot_ms']:.2f} ms dot, {add['additive_ms']:.2f} ms additive ({add['ratio']:.0f}x)",
            add["ratio"] > 1,
            False,
        ),
    ]
    avg = m.get("averaging")
    if avg:
        out.append(
            Claim(
                "12.7",
                "The average of the last checkpoints translates at least as well as the last one",
                "§6.1",
                "BLEU(averaged) >= BLEU(last) on the validation sentences",
                f"{avg['averaged']:.2f} averaged ({len(avg['checkpoints'])} checkpoints), {avg['last']:.2f} last",
                avg["averaged"] >= avg["last"],
                False,
            )
        )
    else:
        out.append(
            Claim(
                "12.7",
                "The average of the last checkpoints translates at least as well as the last one",
                "§6.1",
                "BLEU(averaged) >= BLEU(last)",
                "not measured: --model has no checkpoints here",
                None,
                False,
            )
        )
    return out


def claims_table(m: dict[str, Any]) -> list[Claim]:
    """All claims of items 2-5, 7, 8 and 12, in the report's order."""
    return _trace(m) + _recurrence(m) + _paths(m) + _softmax(m) + _positions(m) + _forcing(m) + _details(m)


def verdict(claim: Claim) -> str:
    return {True: "holds", False: "does not hold", None: "not measured"}[claim.holds]
