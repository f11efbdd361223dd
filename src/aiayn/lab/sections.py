"""The report's prose and tables for items 1-12, from the numbers of measure.py (figures drawn apart)."""

from __future__ import annotations

from typing import Any

from .claims import ratio
from .cost import P100_FLOPS, TABLE2
from .measure import DISTANCES, MASK_STEPS


def _e(x: float | None) -> str:
    return "" if x is None else f"{x:.1e}"


def intro(m: dict[str, Any]) -> list[tuple]:
    one = m["one"]
    where = "trained here for this report" if m.get("trained_here", False) else "given with --model"
    blocks = [
        (
            "p",
            f"Model: {m['model_dir']} ({where}); {one['parameters']:,} parameters; "
            f"{'--quick run' if m['quick'] else 'full run'}, measured in {m['seconds']:.0f} s with "
            f"{m.get('threads', '?')} CPU thread(s). Timings vary from run to run and with the load of the machine.",
        )
    ]
    arithmetic = "The claims about the arithmetic (2-5, 7, 8.1, 8.2, 12.1-12.5) hold whatever the model."
    if m.get("trained_here", False):
        blocks.append(
            (
                "p",
                "This model is small and briefly trained, so the figures that read a trained model mean "
                'little: the translation (item 1), where "it" looks (item 6), p(right token) (item 8) and '
                f"the averaged checkpoint (12.7). {arithmetic} Pass --model with a fully trained model for "
                "the rest.",
            )
        )
    elif one["parameters"] < 20_000_000:  # a trained model, but far from the paper's base (65M)
        blocks.append(
            (
                "p",
                f"This model has {one['parameters'] / 1e6:.1f}M parameters (the paper's base model: 65M) "
                "and was trained on what --model's folder says, not on WMT 2014; the figures that read it "
                "(items 1, 6, 8 and 12.7) show this model, not the paper's. " + arithmetic,
            )
        )
    return blocks


def translation(m: dict[str, Any]) -> list[tuple]:
    one = m["one"]
    cfg = ", ".join(f"{k} {v:,}" for k, v in one["config"].items())
    shapes = "\n".join(f"{k:32s} {v}" for k, v in one["shapes"].items())
    counts = ", ".join(f"{k} {v:,}" for k, v in one["parameter_counts"].items())
    return [
        ("h", 2, "1. A trained Transformer translating one sentence (§3, Figure 1)"),
        ("p", f"{cfg}. Parameters: {one['parameters']:,} ({counts}; the shared embedding once)."),
        (
            "pre",
            f"source : {one['sentence']}\nsource pieces ({len(one['source_pieces'])}): {one['source_pieces']}\n"
            f"output : {one['translation']}\noutput pieces ({len(one['output_pieces'])}): {one['output_pieces']}\n"
            f"{shapes}",
        ),
    ]


def recurrence(m: dict[str, Any], drawn: dict[str, str]) -> list[tuple]:
    tm, n = m["timings"], m["lengths"]
    rows = [
        [
            int(v),
            f"{tm['rnn_loop'][i]:.1f}",
            f"{tm['rnn'][i]:.1f}",
            f"{tm['attention'][i]:.1f}",
            f"{tm['sdpa'][i]:.1f}",
            f"{tm['gru'][i]:.1f}",
            f"{tm['mha'][i]:.1f}",
            ratio(tm["gru"][i], tm["mha"][i]),
        ]
        for i, v in enumerate(n)
    ]
    return [
        ("h", 2, "2. The recurrence h_t = tanh(w h_(t-1) + u x_t), w = 0.5, u = 1, h_0 = 0 (§1)"),
        ("img", drawn["recurrence_trace"], "the trace of word 1 halves at each step (claim 2.1)"),
        ("h", 2, "3. A recurrent layer against a self-attention layer (§1, §4)"),
        (
            "p",
            "Batch 32, width 512, forward pass only, fastest of a few runs, random weights (claims 3.1-3.5). "
            "The recurrent layers take n steps in order; the attention layers one product.",
        ),
        (
            "table",
            ["n", "our RNN loop ms", "nn.RNN ms", "eq. 1 ms", "SDPA ms", "nn.GRU ms", "MHA ms", "GRU / MHA"],
            rows,
        ),
        ("img", drawn["layer_timings"], "forward time against the number of words"),
        ("img", drawn["change_one_word"], "change word 3 only: which outputs move (claim 3.4)"),
    ]


def table1(m: dict[str, Any], drawn: dict[str, str]) -> list[tuple]:
    rows = [[kind, m["sequential"][kind], *m["path_lengths"][kind]] for kind in m["path_lengths"]]
    return [
        ("h", 2, "4. Table 1, measured on the dependency graph (§4)"),
        (
            "p",
            "Each layer type is a graph over n positions; the counts are shortest paths in it (claims 4.1-4.3). "
            "Convolution kernel k = 3 (ConvS2S-style, causal), dilated kernel 2 with dilations 1, 2, 4, ... "
            "(ByteNet-style), restricted attention over r = 4 positions either side.",
        ),
        ("table", ["layer", "sequential operations (n = 100)", *[f"path, d = {d}" for d in DISTANCES]], rows),
        ("img", drawn["path_lengths"], "path length against distance; per-layer FLOPs cross at n = d"),
    ]


def softmax_section(m: dict[str, Any], drawn: dict[str, str]) -> list[tuple]:
    w = m["widget"]
    return [
        ("h", 2, "5. Softmax scaling (§3.2.1, footnote 4)"),
        (
            "p",
            "Random q and k with unit-variance components, 10 keys per query (claims 5.1-5.3). The overview's "
            "widget at d_k 64 and raw scale 2 (scores 16, 8, 0): scaled weights "
            + ", ".join(f"{v:.3f}" for v in w[True])
            + "; unscaled "
            + ", ".join(f"{v:.4f}" for v in w[False])
            + ".",
        ),
        ("img", drawn["softmax_scaling"], "variance, largest weight, entropy and gradient size against d_k"),
    ]


def heads_section(m: dict[str, Any], drawn: dict[str, str]) -> list[tuple]:
    h = m["heads"]
    blocks = [("h", 2, f'6. Multi-head attention: where "it" looks (§3.2.2, appendix), encoder layer {h["layer"] + 1}')]
    if drawn.get("heads") is None:
        return blocks + [("p", 'The source has no piece "it" in this model\'s vocabulary; nothing to show.')]
    tops = ", ".join(f"head {i + 1}: {t}" for i, t in enumerate(h["word_top"]))
    blocks.append(
        (
            "p",
            f"The word looks most at: {tops}. The appendix shows layer 5 of 6; this is the layer before "
            "the last (aiayn paper --layer N for another).",
        )
    )
    blocks.append(("img", drawn["heads"], "every head of one encoder layer, and the output pronoun's cross-attention"))
    if drawn.get("appendix_attention"):
        blocks += [
            (
                "p",
                "The sentences of the appendix's Figures 3-5, in the same layer: each word's attention over the "
                "others, a word's pieces merged (a query word's row the mean of its pieces' rows, a key word's "
                "weight the sum over its pieces), averaged over the heads.",
            ),
            ("img", drawn["appendix_attention"], "the appendix's sentences, word to word"),
        ]
    return blocks


def positions_section(m: dict[str, Any], drawn: dict[str, str]) -> list[tuple]:
    return [
        ("h", 2, "7. Positional encodings (§3.5)"),
        (
            "p",
            f"PE(pos+k) = M_k PE(pos), one rotation M_k per offset: largest error {m['pe_linearity']:.1e} (claim 7.2).",
        ),
        ("img", drawn["positional_encoding"], "the table, a few dimensions, the wavelengths"),
    ]


def forcing_section(m: dict[str, Any], drawn: dict[str, str]) -> list[tuple]:
    f = m["forcing"]
    return [
        ("h", 2, "8. Teacher forcing against step-by-step generation (§3.1, §5)"),
        (
            "p",
            f"One teacher-forced call gives logits {f['logits_shape']} in {f['forcing_ms']:.1f} ms; greedy "
            f"generation needs {f['calls']} calls, {f['generation_ms']:.0f} ms, and computes the same logits "
            f"within {f['max_difference']:.1e} (claims 8.1-8.3). The mask experiment trains a tiny model of the "
            f"same kind twice, {MASK_STEPS:,} steps of 32 pairs drawn from Multi30k's training set, once without the "
            "causal mask; validation pairs it never saw score both, teacher-forced and by greedy generation, which "
            "has no future to copy.",
        ),
        ("img", drawn["teacher_forcing"], "p(right token) at each position; loss with and without the causal mask"),
    ]


def cost_section(m: dict[str, Any], drawn: dict[str, str]) -> list[tuple]:
    c = m["cost"]
    rows = [[r.model, r.bleu_en_de or "", r.bleu_en_fr or "", _e(r.flops_en_de), _e(r.flops_en_fr)] for r in TABLE2]
    ours = [
        [name, f"{v['estimated']:.2e}", f"{v['counted']:.2e}", f"{v['utilisation']:.0%}"]
        for name, v in c["models"].items()
    ]
    blocks = [
        ("h", 2, "9. Table 2: training cost (§6.1)"),
        ("table", ["model", "BLEU En-De", "BLEU En-Fr", "FLOPs En-De", "FLOPs En-Fr"], rows),
        (
            "p",
            f"The paper's estimate is training time x GPUs x the sustained single-precision rate "
            f"({P100_FLOPS / 1e12:.1f} TFLOPS for a P100): 12 h x 8 x 9.5e12 = 3.3e18 (base), 3.5 days x 8 x "
            "9.5e12 = 2.3e19 (big). Counted from the models' matrix products (aiayn.train.flops: about 6 x "
            "parameters x tokens plus attention) for 100,000 / 300,000 steps of 25,000 + 25,000 tokens in "
            "sentences of 25 pieces, the same runs need 3-4 times less: the estimate assumes every GPU at its "
            "sustained peak for the whole run, while real training loses time to softmax, layer norm, the "
            "input pipeline, communication and padding, and the count leaves those out.",
        ),
        ("table", ["model", "time x GPUs x 9.5 TFLOPS", "counted", "counted / estimate"], ours),
    ]
    run = c.get("run")
    if run:
        blocks.append(
            (
                "p",
                f"This machine's run: {run['steps']:,} steps in {run['minutes']:.1f} min; counted "
                f"{run['counted']:.2e} FLOPs; time x this machine's measured matrix-product rate "
                f"({c['machine_rate']:.2e} FLOP/s) = {run['estimated']:.2e}. Its BLEU is on Multi30k, not "
                "newstest2014, so it is not drawn beside the paper's rows.",
            )
        )
    return blocks + [("img", drawn["bleu_vs_flops"], "BLEU against training FLOPs (Table 2)")]


def table3_section(m: dict[str, Any]) -> list[tuple]:
    rows = [
        [
            r["group"],
            r["label"],
            f"{r['paper_m']}" + (" (cell empty: base)" if r["paper_cell_empty"] else ""),
            "needs ModelConfig.d_k" if r["counted_m"] is None else f"{r['counted_m']:.1f}",
        ]
        for r in m["table3_counts"]
    ]
    return [
        ("h", 2, "10. Table 3: parameter counts (§6.2)"),
        (
            "p",
            "Each row built from the base preset with its change, counted by aiayn. Vocabulary assumption: one "
            "shared En-De vocabulary of 37,000 BPE pieces (§5.1), one matrix for both embeddings and the "
            "pre-softmax projection (§3.4), sinusoids (no parameters; learned positions add 1,024 x d_model). "
            "The counts fall 2-5% below the table's column; the paper does not state its exact vocabulary.",
        ),
        ("table", ["group", "row", "paper, millions", "counted here, millions"], rows),
        ("h", 2, "11. Table 3 at small scale"),
        (
            "p",
            "A benchmark, not part of this report: `aiayn paper table3 --steps S` trains the paper's base scaled "
            "down and each variation for the same steps on Multi30k, the base with several seeds, and judges each "
            "group as §6.2 states it against the seeds' spread. See docs/paper.md for a run.",
        ),
    ]


def details_section(m: dict[str, Any], drawn: dict[str, str]) -> list[tuple]:
    return [
        ("h", 2, "12. The smaller claims"),
        ("p", "Claims 12.1-12.7 in the table above; the learning-rate curve of eq. 3:"),
        ("img", drawn["learning_rate"], "eq. 3 for the base model"),
    ]


def texts_section(m: dict[str, Any], drawn: dict[str, str]) -> list[tuple]:
    """Item 13: what the explanatory texts in ../shared/paper add to the paper, each measured."""
    blocks: list[tuple] = [
        ("h", 2, "13. What the explanatory texts add"),
        (
            "p",
            "A recurrent layer passes a word's signal on through one step per position, and its gradient shrinks at "
            "each step; self-attention reaches every position in one (claim 13.1):",
        ),
        ("img", drawn["gradient_distance"], "the gradient reaching a word k positions back (claim 13.1)"),
    ]
    shift = m.get("shift")
    if shift:
        rows = [
            [i, shift["pieces"][i], shift["pieces"][i + 1], f"{shift['moved'][i]:.1e}"]
            for i in range(len(shift["target"]))
        ]
        blocks += [
            (
                "p",
                f'The decoder input is the target shifted right (claim 13.2), on the first validation pair: "'
                f'{shift["source_text"]}" -> "{shift["target_text"]}". Output i reads the decoder inputs up to i and '
                f"predicts target i; target {shift['changed']} was changed, and the last column is how far each "
                "position's logits moved.",
            ),
            ("table", ["position i", "decoder input i", "target i (predicted)", "logits moved"], rows),
        ]
    blocks += [
        (
            "p",
            "Memory (claim 13.4): what one training step keeps, the activations autograd saves counted as they are "
            "saved at a few batch sizes (25 pieces a side) plus 16 bytes a parameter for the weights, gradients and "
            "Adam's moments, drawn out to this machine's memory.",
        ),
        ("img", drawn["lengths_figure"], "memory against the batch (claim 13.4)"),
        *rows_blocks(m, drawn),
    ]
    rows = [
        [
            r["model"],
            r["pair"],
            f"{r['flops_over_base']:.1f}x",
            f"{r['flops_over_big']:.2f}x",
            f"{r['base_bleu_gain']:+.2f}",
            f"{r['big_bleu_gain']:+.2f}",
        ]
        for r in m["earlier_models"]
    ]
    blocks += [
        (
            "p",
            'The interactive overview says "both Transformer models achieve higher BLEU scores with orders of '
            'magnitude less training compute" (claim 13.3). Table 2 says less: against single models the base model '
            "costs 3-45x less and the big one 0.4-6.5x (ConvS2S and MoE on EN-DE cost less than the big model), and "
            "the base model scores below every earlier single model on EN-FR; a hundredfold or more holds only for the "
            'base model against the EN-FR ensembles, which it does not beat. The paper\'s own words are "a small fraction of the training costs". The '
            "paper also gives the big model's EN-FR score twice: 41.8 in Table 2 and the abstract, 41.0 in §6.1's "
            "text. And the overview's \"layer 5\" is the paper's (Figure 3-5: encoder self-attention in layer 5 of "
            "6), which item 6 follows with the layer before the last.",
        ),
        (
            "table",
            ["earlier model", "pair", "its FLOPs / base's", "its FLOPs / big's", "base BLEU gain", "big BLEU gain"],
            rows,
        ),
    ]
    return blocks


def rows_blocks(m: dict[str, Any], drawn: dict[str, str]) -> list[tuple]:
    """Claims 13.5-13.7, drawn from Table 3's trained rows where the report was given them (--table3)."""
    r = m.get("rows")
    if not r:
        return [
            (
                "p",
                "Claims 13.5-13.7 read Table 3's trained rows: run `aiayn paper table3 --out DIR ... --short 20`, "
                "then this report with `--table3 DIR/table3`.",
            )
        ]
    blocks: list[tuple] = [("p", f"Claims 13.5-13.7 read the Table 3 run in {r['folder']} (its table: docs/paper.md).")]
    for name, text in (
        ("label_smoothing", "Label smoothing, the same model and steps at three eps_ls (claim 13.5):"),
        (
            "one_head",
            "One head against the base's heads: how spread each head's attention is over the keys, on 200 validation "
            "pairs (claim 13.6):",
        ),
        (
            "extrapolation",
            f"Two models trained on pairs of at most {r.get('cut', '?')} pieces, scored on every validation pair by "
            "length (claim 13.7):",
        ),
    ):
        if drawn.get(name):
            blocks += [("p", text), ("img", drawn[name], text.rstrip(":"))]
    return blocks


def body(m: dict[str, Any], drawn: dict[str, str]) -> list[tuple]:
    return [
        *translation(m),
        *recurrence(m, drawn),
        *table1(m, drawn),
        *softmax_section(m, drawn),
        *heads_section(m, drawn),
        *positions_section(m, drawn),
        *forcing_section(m, drawn),
        *cost_section(m, drawn),
        *table3_section(m),
        *details_section(m, drawn),
        *texts_section(m, drawn),
    ]
