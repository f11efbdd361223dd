"""The report's figures: one function per figure, each drawing numbers from measure.py into a PNG."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402

from ..files import temporary_beside  # noqa: E402
from .cost import TABLE2  # noqa: E402

DPI = 90


def _save(fig, out: Path, name: str) -> str:
    """Write the figure whole or not at all (a temporary name, then a rename); return its file name."""
    fig.tight_layout()
    tmp = temporary_beside(out / name)
    try:
        fig.savefig(tmp, dpi=DPI, format="png")
        os.replace(tmp, out / name)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return name


def recurrence_trace(m: dict[str, Any], out: Path) -> str:
    """Item 2: h_t of the scalar recurrence against halving."""
    trace = m["trace"]
    t = np.arange(1, len(trace) + 1)
    fig, ax = plt.subplots(figsize=(5.5, 3))
    ax.bar(t, trace, color="tab:blue", label="h_t = tanh(0.5 h_(t-1) + x_t), x = 1, 0, 0, ...")
    ax.plot(t, trace[0] * 0.5 ** (t - 1), "k--", marker="o", ms=3, label="h_1 x 0.5^(t-1)")
    ax.set_xticks(t, [f"t = {ti}\n{h:.4f}" for ti, h in zip(t, trace)], fontsize=8)
    ax.set(ylabel="h_t (the trace of word 1)", ylim=(0, 0.85))
    ax.legend(fontsize=8)
    return _save(fig, out, "recurrence_trace.png")


def layer_timings(m: dict[str, Any], out: Path) -> str:
    """Item 3: forward time against n, recurrent layers and attention layers."""
    n, tm = m["lengths"], m["timings"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    styles = {
        "rnn_loop": ("our RNN loop", "tab:red", "-"),
        "rnn": ("nn.RNN", "tab:red", "--"),
        "attention": ("eq. 1 by hand", "tab:blue", "-"),
        "sdpa": ("F.scaled_dot_product_attention", "tab:blue", "--"),
        "gru_loop": ("our GRU loop", "tab:orange", "-"),
        "gru": ("nn.GRU", "tab:orange", "--"),
        "mha": ("nn.MultiheadAttention (8 heads)", "tab:green", "-"),
    }
    for ax, names, title in (
        (axes[0], ("rnn_loop", "rnn", "attention", "sdpa"), "tanh RNN against eq. 1 (no weights)"),
        (axes[1], ("gru_loop", "gru", "mha"), "GRU against a learned attention layer"),
    ):
        for name in names:
            label, color, line = styles[name]
            ax.plot(n, tm[name], line, color=color, marker="o", ms=3, label=label)
        ax.set(xscale="log", yscale="log", xlabel="words n (batch 32, width 512)", title=title)
        ax.set_xticks(n, [str(v) for v in n])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend(fontsize=7)
    axes[0].set_ylabel("forward time, ms (fastest run)")
    return _save(fig, out, "layer_timings.png")


def change_one_word(m: dict[str, Any], out: Path) -> str:
    """Item 3: how much each output moves when only word 3 changes."""
    change = m["change"]
    pos = np.arange(len(change["rnn"]))
    fig, ax = plt.subplots(figsize=(6.5, 3))
    ax.bar(pos - 0.2, change["rnn"], 0.4, color="tab:red", label="recurrent layer")
    ax.bar(pos + 0.2, change["attention"], 0.4, color="tab:blue", label="self-attention")
    ax.axvline(3, color="gray", lw=0.8, ls=":")
    ax.set(xlabel="output position (word 3 changed)", ylabel="largest change of the output", xticks=pos)
    ax.legend(fontsize=8)
    return _save(fig, out, "change_one_word.png")


def path_lengths(m: dict[str, Any], out: Path) -> str:
    """Item 4: measured path lengths against distance, and per-layer FLOPs against n."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    d = m["distances"]
    labels = {
        "self-attention": "self-attention",
        "recurrent": "recurrent",
        "convolutional": "convolution, k = 3",
        "dilated": "dilated convolution, k = 2",
        "restricted": "restricted attention, r = 4",
    }
    for kind, lengths in m["path_lengths"].items():
        axes[0].plot(d, lengths, marker="o", ms=3, label=labels[kind])
    axes[0].set(
        xscale="log",
        yscale="log",
        xlabel="distance d between the positions",
        ylabel="operations on the shortest path",
        title="Table 1: path length, measured on the graph",
    )
    axes[0].set_xticks(d, [str(v) for v in d])
    axes[0].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[0].legend(fontsize=7)
    n, fl = m["flops_n"], m["layer_flops"]
    axes[1].plot(n, fl["self-attention"], marker="o", ms=3, label="self-attention (4 n^2 d)")
    axes[1].plot(n, fl["recurrent"], marker="o", ms=3, label="recurrent (4 n d^2)")
    axes[1].axvline(512, color="gray", ls=":", lw=0.8)
    axes[1].text(512, fl["recurrent"].min(), " n = d = 512", fontsize=8)
    axes[1].set(
        xscale="log",
        yscale="log",
        xlabel="sequence length n (d = 512)",
        ylabel="FLOPs of one layer",
        title="per-layer FLOPs (torch's FLOP counter)",
    )
    axes[1].legend(fontsize=7)
    return _save(fig, out, "path_lengths.png")


def softmax_scaling(m: dict[str, Any], out: Path) -> str:
    """Item 5: var(q.k), the largest weight, the entropy and the gradient against d_k."""
    d_k, s = m["d_ks"], m["saturation"]
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
    axes[0].plot(d_k, m["variance"], "o", ms=4, label="measured")
    axes[0].plot(d_k, d_k, "k--", lw=0.8, label="var = d_k")
    axes[0].set(xscale="log", yscale="log", xlabel="d_k", title="var(q . k)")
    axes[0].legend(fontsize=7)
    for ax, key, title in (
        (axes[1], "max_weight", "largest softmax weight (10 keys)"),
        (axes[2], "entropy", "entropy of the weights, nats"),
        (axes[3], "gradient", "|diag(p) - p p^T| (gradient size)"),
    ):
        ax.plot(d_k, s[f"{key}_scaled"], marker="o", ms=3, label="softmax(q.k / sqrt(d_k))")
        ax.plot(d_k, s[f"{key}_unscaled"], marker="o", ms=3, label="softmax(q.k), unscaled")
        ax.set(xscale="log", xlabel="d_k", title=title)
        ax.legend(fontsize=7)
    axes[2].axhline(np.log(10), color="gray", ls=":", lw=0.8, label="log 10: uniform over the 10 keys")
    axes[2].legend(fontsize=7)
    return _save(fig, out, "softmax_scaling.png")


def positional_encoding(m: dict[str, Any], out: Path) -> str:
    """Item 7: the table, a few dimensions' waves, and the wavelengths at d_model 512."""
    pe, w = m["pe"], m["wavelengths"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    im = axes[0].imshow(pe, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest")
    axes[0].set(
        xlabel="dimension (sin, cos interleaved)", ylabel="position", title=f"PE, d_model = {pe.shape[1]} (to fit)"
    )
    fig.colorbar(im, ax=axes[0], fraction=0.04)
    for dim in (0, 20, 40, 80):
        axes[1].plot(pe[:, dim], lw=1, label=f"dim {dim}")
    axes[1].set(xlabel="position", ylabel="PE(pos, dim)", title="a few dimensions")
    axes[1].legend(fontsize=7, ncol=2)
    axes[2].plot(np.arange(0, 512, 2), w, lw=1.5)
    axes[2].axhline(2 * np.pi * 10000, color="gray", ls=":", lw=0.8)
    axes[2].text(0, 2 * np.pi * 10000 * 0.45, "10000 x 2 pi (approached, never reached)", fontsize=7)
    axes[2].set(yscale="log", xlabel="dimension 2i (d_model = 512)", ylabel="wavelength", title=f"2 pi to {w[-1]:,.0f}")
    return _save(fig, out, "positional_encoding.png")


def heads(m: dict[str, Any], out: Path) -> str | None:
    """Item 6: where the word looks in each head of one encoder layer, and the output pronoun's cross-attention."""
    h = m["heads"]
    if h.get("word_rows") is None:
        return None
    rows, pieces = h["word_rows"], h["source_pieces"]
    n_heads = rows.shape[0]
    cross = h.get("pronoun_cross")
    fig, axes = plt.subplots(
        1, 2, figsize=(12, 0.45 * max(n_heads, 4) + 1.6), gridspec_kw={"width_ratios": [3, 2]}, squeeze=False
    )
    ax = axes[0][0]
    im = ax.imshow(rows, aspect="auto", cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(pieces)), pieces, rotation=60, fontsize=8)
    ax.set_yticks(range(n_heads), [f"head {i + 1}" for i in range(n_heads)], fontsize=8)
    word = pieces[h["word_index"]]
    ax.set_title(f"encoder layer {h['layer'] + 1}: where {word!r} (position {h['word_index']}) looks", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.03)
    ax = axes[0][1]
    if cross is not None:
        im = ax.imshow(cross, aspect="auto", cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(pieces)), pieces, rotation=60, fontsize=8)
        ax.set_yticks(range(cross.shape[0]), [f"layer {i + 1}" for i in range(cross.shape[0])], fontsize=8)
        pronoun = h["output_pieces"][h["pronoun_index"]]
        ax.set_title(f"output {pronoun!r}: encoder-decoder attention, mean of heads", fontsize=9)
    else:
        ax.axis("off")
        ax.text(0.05, 0.5, "the translation has no pronoun er / es / sie", fontsize=9)
    return _save(fig, out, "heads.png")


def teacher_forcing(m: dict[str, Any], out: Path) -> str:
    """Item 8: p(right token) per position, and the loss with and without the causal mask."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
    p, pieces = m["loss"]["p_right"], m["one"]["output_pieces"]
    axes[0].bar(range(len(p)), p, color="tab:blue")
    axes[0].set_xticks(range(len(p)), pieces, rotation=60, fontsize=8)
    axes[0].set(ylim=(0, 1), ylabel="p(right token)", title="teacher forcing: the model's own translation")
    mask = m.get("mask")
    if mask is None:
        axes[1].axis("off")
        axes[1].text(0.05, 0.5, "the mask experiment is not run with --quick", fontsize=9)
        return _save(fig, out, "teacher_forcing.png")
    for name, label in (("masked", "causal mask"), ("unmasked", "no mask")):
        axes[1].plot(
            mask[f"{name}_loss"],
            lw=1,
            label=f"{label}: held-out loss {mask[f'{name}_held_out_loss']:.2f}, "
            f"generation accuracy {mask[f'{name}_accuracy']:.0%}",
        )
    axes[1].set(
        xlabel="training step (tiny model)",
        ylabel="training loss, nats per token",
        ylim=(0, None),
        title="training with and without the causal mask",
    )
    axes[1].legend(fontsize=7)
    return _save(fig, out, "teacher_forcing.png")


def bleu_vs_flops(m: dict[str, Any], out: Path) -> str:
    """Item 9: Table 2's BLEU against training FLOPs, En-De and En-Fr, and the paper's models counted here."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8), gridspec_kw={"width_ratios": [3, 3, 2]})
    for ax, pair in ((axes[0], "en_de"), (axes[1], "en_fr")):
        for row in TABLE2:
            bleu, flops = getattr(row, f"bleu_{pair}"), getattr(row, f"flops_{pair}")
            if bleu is None or flops is None:
                continue
            ours = row.model.startswith("Transformer")
            ax.plot(flops, bleu, "*" if ours else "o", ms=11 if ours else 6, color="tab:red" if ours else "tab:gray")
            below = row.model.startswith("GNMT") and "Ensemble" in row.model  # beside ConvS2S Ensemble otherwise
            ax.annotate(
                row.model, (flops, bleu), fontsize=7, xytext=(4, -9 if below else 3), textcoords="offset points"
            )
        if pair == "en_de":
            for name, c in m["cost"]["models"].items():
                bleu = 27.3 if name == "base" else 28.4
                ax.plot(c["counted"], bleu, "x", color="tab:blue", ms=8)
                ax.annotate(
                    f"{name}: the paper's BLEU at FLOPs counted from its size",
                    (c["counted"], bleu),
                    fontsize=7,
                    xytext=(4, -10),
                    textcoords="offset points",
                    color="tab:blue",
                )
        ax.margins(x=0.35)
        ax.set(
            xscale="log",
            xlabel="training FLOPs",
            ylabel="BLEU (newstest2014)",
            title=f"Table 2, {'En-De' if pair == 'en_de' else 'En-Fr'}",
        )
    run, avg, ax = m["cost"].get("run"), m.get("averaging"), axes[2]
    if run and avg and run.get("counted"):  # its own axes: Multi30k BLEU is not comparable with newstest2014
        for flops, marker, label in ((run["counted"], "s", "counted"), (run["estimated"], "D", "time x measured rate")):
            ax.plot(flops, avg["averaged"], marker, color="tab:green", ms=6, label=label)
        ax.set(
            xscale="log", xlabel="training FLOPs", ylabel="BLEU (Multi30k validation)", title="this run, both counts"
        )
        ax.margins(x=0.5, y=0.5)
        ax.legend(fontsize=7)
    else:
        ax.axis("off")
        ax.text(0.05, 0.5, "no run of this machine to show\n(--model without results.json)", fontsize=9)
    return _save(fig, out, "bleu_vs_flops.png")


def learning_rate(m: dict[str, Any], out: Path) -> str:
    """Item 12: eq. 3 for the base model."""
    lr = m["lr"]
    fig, ax = plt.subplots(figsize=(5.5, 3))
    ax.plot(lr["steps"], lr["rates"])
    ax.plot(lr["peak_step"], lr["peak_rate"], "ro", ms=4)
    ax.annotate(
        f"peak {lr['peak_rate']:.2e} at step {lr['peak_step']:,}",
        (lr["peak_step"], lr["peak_rate"]),
        xytext=(8, -4),
        textcoords="offset points",
        fontsize=8,
    )
    ax.set(xlabel="training step", ylabel="learning rate", title="eq. 3, d_model 512, warmup 4,000")
    return _save(fig, out, "learning_rate.png")


def gradient_distance(m: dict[str, Any], out: Path) -> str:
    """Item 13: the gradient's norm against distance, recurrent layers against attention."""
    g = m["gradients"]
    k = np.arange(1, len(g["rnn"]))
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for name, label, colour in (
        ("rnn", "tanh RNN", "tab:red"),
        ("gru", "GRU", "tab:orange"),
        ("attention", "self-attention", "tab:blue"),
    ):
        ax.semilogy(k, g[name][1:], label=label, color=colour, linewidth=2)
    ax.set(
        xlabel="distance k (positions back from the last)",
        ylabel="|d y_n / d x_(n-k)|",
        title="the gradient reaching a word k positions back, width 64",
    )
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, out, "gradient_distance.png")


def appendix_attention(m: dict[str, Any], out: Path) -> str | None:
    """Item 6: the appendix's sentences, encoder self-attention of one layer between whole words, mean of the heads."""
    maps = m.get("appendix")
    if not maps:
        return None
    fig, axes = plt.subplots(1, len(maps), figsize=(7.5 * len(maps), 7.5))
    for ax, a in zip(np.atleast_1d(axes), maps):
        image = ax.imshow(a["mean"], cmap="Blues", vmin=0, vmax=max(0.5, float(a["mean"].max())))
        ticks = np.arange(len(a["words"]))
        ax.set_xticks(ticks, a["words"], rotation=90, fontsize=9)
        ax.set_yticks(ticks, a["words"], fontsize=9)
        ax.set(xlabel="key word", ylabel="query word", title=f"encoder layer {a['layer'] + 1}, mean of the heads")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention weight (summed over a word's pieces)")
    return _save(fig, out, "appendix_attention.png")


def lengths_figure(m: dict[str, Any], out: Path) -> str:
    """Item 13: memory of a training step against batch tokens, drawn out to this machine's memory."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for name, mem in m["memory"].items():
        if mem is None:
            continue
        tokens = np.geomspace(100, max(mem["max_tokens"], 30_000), 50)
        total = (mem["fixed_bytes"] + mem["intercept"] + mem["bytes_per_token"] * tokens) / 2**30
        ax.loglog(tokens, total, label=name)
        ax.scatter(mem["tokens"], (mem["fixed_bytes"] + mem["saved_bytes"]) / 2**30, s=12)
        ram = mem["ram_bytes"] / 2**30
    ax.axhline(ram, color="black", linestyle="--", linewidth=1, label=f"this machine's memory, {ram:.0f} GiB")
    ax.axvline(25_000, color="tab:gray", linestyle=":", label="the paper's 25,000 tokens a side")
    ax.set(xlabel="batch tokens a side", ylabel="GiB a training step keeps", title="memory against the batch")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, out, "memory.png")


def label_smoothing(m: dict[str, Any], out: Path) -> str | None:
    """Item 13 (claim 13.5): Table 3's rows D, perplexity and BLEU against eps_ls, with the seeds' spread."""
    r = m.get("rows")
    labels = [("eps_ls=0.0", "0"), ("base", "0.1 (base)"), ("eps_ls=0.2", "0.2")]
    present = [(k, name) for k, name in labels if r and k in r["rows"]]
    if len(present) < 2:
        return None
    rows = [r["rows"][k] for k, _ in present]
    fig, axes = plt.subplots(1, 2, figsize=(7, 3.2))
    for ax, key, title in ((axes[0], "ppl", "dev perplexity (lower is better)"), (axes[1], "bleu", "dev BLEU")):
        values = [row[key] for row in rows]
        errors = [row.get(f"{key}_spread", 0) / 2 for row in rows]
        ax.bar([name for _, name in present], values, yerr=errors, capsize=4, color="tab:blue")
        low, high = min(values), max(values)
        ax.set_ylim(low - (high - low + 0.1) * 1.5, high + (high - low + 0.1) * 0.8)
        ax.set(xlabel="label smoothing eps_ls", title=title)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle("Table 3 rows D: the same model and steps, three eps_ls")
    return _save(fig, out, "label_smoothing.png")


def one_head(m: dict[str, Any], out: Path) -> str | None:
    """Item 13 (claim 13.6): attention entropy per layer, one head against each of the base's heads."""
    r = m.get("rows")
    if not r or "entropy" not in r:
        return None
    e = r["entropy"]
    fig, axes = plt.subplots(1, 2, figsize=(7, 3.2), sharey=True)
    for ax, name, title in ((axes[0], "encoder", "encoder self-attention"), (axes[1], "cross", "encoder-decoder")):
        base, one = e["base"][name], e["h=1"][name]  # (L, h), (L, 1)
        layers = np.arange(1, len(base) + 1)
        for i, heads_ in enumerate(base):
            ax.scatter(
                np.full(len(heads_), layers[i]) - 0.08,
                heads_,
                s=14,
                color="tab:blue",
                alpha=0.6,
                label=f"the base's {base.shape[1]} heads" if i == 0 else None,
            )
        ax.plot(layers, base.mean(1), color="tab:blue", linewidth=1, label="their mean")
        ax.plot(layers + 0.08, one[:, 0], "o-", color="tab:red", label="one head (h = 1)")
        ax.set(xlabel="layer", title=title, xticks=layers)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean attention entropy, nats")
    axes[0].legend(fontsize=8)
    return _save(fig, out, "one_head.png")


def extrapolation(m: dict[str, Any], out: Path) -> str | None:
    """Item 13 (claim 13.7): perplexity by length for models trained on short pairs, sinusoids against learned."""
    r = m.get("rows")
    if not r or "by_length" not in r:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for name, colour, label in (("sinusoids", "tab:blue", "sinusoidal"), ("learned", "tab:red", "learned")):
        buckets = [b for b in r["by_length"][name] if b["ppl"] is not None]
        labels = [f"{b['from']}-{b['upto']}" if b["upto"] else f"{b['from']}+" for b in buckets]
        ax.plot(labels, [b["ppl"] for b in buckets], "o-", color=colour, label=f"{label} positions")
    edges = [b["upto"] for b in r["by_length"]["sinusoids"] if b["ppl"] is not None]
    seen = sum(1 for e in edges if e is not None and e <= r["cut"])
    ax.axvline(seen - 0.5, color="black", linestyle="--", linewidth=1, label=f"trained up to {r['cut']} pieces")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_yticks([3, 5, 10, 20, 50])
    ax.set(xlabel="the pair's longer side, pieces", ylabel="dev perplexity (log)", title="beyond the training lengths")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, out, "extrapolation.png")


ALL = (
    recurrence_trace,
    layer_timings,
    change_one_word,
    path_lengths,
    softmax_scaling,
    positional_encoding,
    heads,
    teacher_forcing,
    bleu_vs_flops,
    learning_rate,
    gradient_distance,
    appendix_attention,
    lengths_figure,
    label_smoothing,
    one_head,
    extrapolation,
)
