"""The GPU benchmark (issue 6): training and beam search on one CUDA card, aiayn beside Hugging Face.

    python benchmarks/gpu.py                # a CUDA machine; about 2-4 minutes; prints one table
    python benchmarks/gpu.py --compile      # training with torch.compile too (adds the compile time)
    python benchmarks/gpu.py --dry-run      # every code path on the CPU at tiny sizes (no GPU needed)

1. The card's bf16 matrix-multiply rate, measured here (8192^3 products): the peak that model FLOP
   utilisation (MFU) is quoted against.
2. Training, base and big presets (Table 3) with a 37,000-piece vocabulary, bf16 autocast, fused
   Adam (0.9, 0.98, 1e-9), eq. 3, label smoothing 0.1, dropout on: src+tgt tokens/s and MFU, where
   the FLOPs are `aiayn.train.flops.train_flops` (the matrix products; backward = 2 x forward).
   The peer is `MarianMTModel` with the same shapes (ReLU, sinusoids, tied embeddings), the same
   loss and optimizer. Batches of 512 x 48 source + 512 x 48 target tokens (~25,000 a side, §5.1).
3. Beam search (beam 4) with opus-mt-en-de's shapes (PEERS.md: vocabulary 58,101, swish), the same
   random weights in both engines, 512 random sentences of 8..40 tokens, batches of 64, bf16
   autocast, every output forced to 40 tokens (</s> is given a -1e4 logit bias in both).
Engines alternate round by round; the table shows medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from aiayn import cpu  # noqa: E402
from aiayn.config import DecodeConfig, ModelConfig  # noqa: E402
from aiayn.decode.beam import beam_search  # noqa: E402
from aiayn.model import Transformer  # noqa: E402
from aiayn.train.flops import train_flops  # noqa: E402
from aiayn.train.loss import label_smoothed_nll  # noqa: E402
from aiayn.train.schedule import rate  # noqa: E402


@dataclass(frozen=True)
class Sizes:
    matmul: int  # n of the n x n x n bf16 products
    presets: tuple[str, ...]  # training presets
    vocab: int  # training vocabulary
    batch: int  # training sentences per batch
    length: int  # source and target length of every training sentence
    rounds: int  # timed rounds per engine (alternating)
    steps: int  # training steps per round
    mt_vocab: int  # translation vocabulary (opus-mt-en-de: 58,101)
    mt_dims: tuple[int, int, int, int]  # d_model, d_ff, heads, layers of the translation model
    sentences: int  # sentences translated per round
    mt_batch: int
    src_len: tuple[int, int]  # source lengths drawn uniformly in this range (plus </s>)
    out_len: int  # generated tokens per sentence, forced


GPU = Sizes(8192, ("base", "big"), 37000, 512, 48, 3, 10, 58101, (512, 2048, 8, 6), 512, 64, (8, 40), 40)
DRY = Sizes(256, ("tiny", "small"), 1000, 4, 8, 1, 2, 1000, (64, 256, 4, 2), 8, 4, (3, 6), 6)
PAD, BOS, EOS = 0, 1, 2  # training ids (aiayn's defaults)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn: Callable[[], object]) -> float:
    sync(device)
    began = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - began


def matmul_rate(device: torch.device, n: int) -> float:
    """The best of 5 timings of 10 bf16 n x n x n products, in FLOP/s."""
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    best = min(timed(device, lambda: [a @ b for _ in range(10)]) for _ in range(5))
    return 10 * 2 * n**3 / best


def marian_config(d_model: int, d_ff: int, heads: int, layers: int, vocab: int, activation: str, **ids: int):
    from transformers import MarianConfig

    return MarianConfig(
        vocab_size=vocab,
        d_model=d_model,
        encoder_ffn_dim=d_ff,
        decoder_ffn_dim=d_ff,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_layers=layers,
        decoder_layers=layers,
        activation_function=activation,
        max_position_embeddings=512,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        attention_dropout=0.0,
        activation_dropout=0.0,
        forced_eos_token_id=None,
        **ids,
    )


@dataclass
class Engine:
    name: str
    forward: Callable  # (src, tgt_in) -> logits (B, T, V)
    optimizer: torch.optim.Optimizer
    memory_gib: float = 0.0


def training_engines(
    preset: str, sizes: Sizes, device: torch.device, compile_: bool
) -> tuple[ModelConfig, list[Engine]]:
    """aiayn's Transformer and MarianMTModel with the preset's shapes, each with fused Adam."""
    from transformers import MarianMTModel

    config = ModelConfig.preset(preset, vocab_size=sizes.vocab, max_len=512)
    with torch.device(device):
        ours = Transformer(config).train()
        hf = MarianMTModel(
            marian_config(
                config.d_model,
                config.d_ff,
                config.n_heads,
                config.n_layers,
                sizes.vocab,
                "relu",
                dropout=config.p_drop,
                pad_token_id=PAD,
                eos_token_id=EOS,
                decoder_start_token_id=BOS,
            )
        ).train()
    if compile_:
        ours.compile(), hf.compile()
    adam = dict(lr=0.0, betas=(0.9, 0.98), eps=1e-9, fused=True)
    return config, [
        Engine("aiayn", ours, torch.optim.Adam(ours.parameters(), **adam)),
        Engine(
            "Hugging Face",
            lambda s, t: hf(input_ids=s, attention_mask=s.ne(PAD), decoder_input_ids=t).logits,
            torch.optim.Adam(hf.parameters(), **adam),
        ),
    ]


def weight_bytes(engine: Engine) -> int:
    return sum(p.numel() * p.element_size() for g in engine.optimizer.param_groups for p in g["params"])


def train_steps(engine: Engine, batch: tuple, config: ModelConfig, steps: int, first: int) -> None:
    """steps optimizer steps of §5 on one batch: eq. 3, bf16 forward, label-smoothed loss, Adam."""
    src, tgt_in, tgt_out = batch
    for step in range(first, first + steps):
        for group in engine.optimizer.param_groups:
            group["lr"] = rate(step + 1, config.d_model, 4000)
        with torch.autocast(src.device.type, dtype=torch.bfloat16):
            logits = engine.forward(src, tgt_in)
        loss, _, n = label_smoothed_nll(logits, tgt_out, 0.1, PAD)
        (loss / n).backward()
        engine.optimizer.step()
        engine.optimizer.zero_grad(set_to_none=True)


def bench_training(preset: str, sizes: Sizes, device: torch.device, peak: float, compile_: bool) -> list[list[str]]:
    config, engines = training_engines(preset, sizes, device, compile_)
    B, L = sizes.batch, sizes.length
    src = torch.randint(4, sizes.vocab, (B, L), device=device)
    tgt = torch.randint(4, sizes.vocab, (B, L), device=device)
    tgt_in = torch.cat([torch.full((B, 1), BOS, device=device), tgt[:, :-1]], dim=1)
    batch = (src, tgt_in, tgt)
    for engine in engines:  # untimed warm-up (and compilation); the engine's peak memory
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            others = torch.cuda.memory_allocated(device) - weight_bytes(engine)  # both models' weights are there
        train_steps(engine, batch, config, 3 if compile_ else 2, 0)
        if device.type == "cuda":
            engine.memory_gib = (torch.cuda.max_memory_allocated(device) - others) / 2**30
    times: dict[str, list[float]] = {e.name: [] for e in engines}
    for r in range(sizes.rounds):
        for engine in engines:
            seconds = timed(device, lambda: train_steps(engine, batch, config, sizes.steps, 10 + r * sizes.steps))
            times[engine.name].append(seconds / sizes.steps)
    step = {name: statistics.median(t) for name, t in times.items()}
    flops = train_flops(config, B, L, L)
    tok_s = {name: 2 * B * L / s for name, s in step.items()}
    mfu = {name: flops / s / peak for name, s in step.items()}
    millions = sum(p.numel() for g in engines[0].optimizer.param_groups for p in g["params"]) / 1e6
    label = f"train {preset} ({millions:.0f}M), bf16{', compiled' if compile_ else ''}"
    rows = [
        [
            f"{label}: src+tgt tok/s (MFU)",
            *(f"{tok_s[e.name]:,.0f} ({mfu[e.name]:.0%})" for e in engines),
            f"{tok_s['aiayn'] / tok_s['Hugging Face']:.2f}x",
        ]
    ]
    if device.type == "cuda":
        rows.append(
            [
                f"train {preset}: peak memory GiB",
                *(f"{e.memory_gib:.1f}" for e in engines),
                f"{engines[0].memory_gib / engines[1].memory_gib:.2f}x",
            ]
        )
    return rows


def translation_models(sizes: Sizes, device: torch.device):
    """opus-mt-en-de's shapes with random weights: MarianMTModel and the same weights in aiayn's model."""
    from transformers import MarianMTModel

    from aiayn.marian.load import MARIAN_DEFAULTS, model_config_from_marian, state_dict_from_marian

    d_model, d_ff, heads, layers = sizes.mt_dims
    pad = eos_pad = sizes.mt_vocab - 1
    hf = MarianMTModel(
        marian_config(
            d_model,
            d_ff,
            heads,
            layers,
            sizes.mt_vocab,
            "swish",
            pad_token_id=pad,
            eos_token_id=0,
            decoder_start_token_id=eos_pad,
        )
    ).eval()
    with torch.no_grad():
        hf.final_logits_bias[0, 0] = -1e4  # random weights must never stop: every output has out_len tokens
    config = model_config_from_marian({**MARIAN_DEFAULTS, **hf.config.to_dict()}, unk_id=1)
    ours = Transformer(config)
    ours.load_state_dict(state_dict_from_marian(hf.state_dict(), ours))
    return ours.to(device).eval(), hf.to(device), pad


def bench_translation(sizes: Sizes, device: torch.device) -> list[list[str]]:
    ours, hf, pad = translation_models(sizes, device)
    g = torch.Generator().manual_seed(1234)
    lengths = torch.randint(sizes.src_len[0], sizes.src_len[1] + 1, (sizes.sentences,), generator=g)
    batches = []
    for start in range(0, sizes.sentences, sizes.mt_batch):
        chunk = lengths[start : start + sizes.mt_batch]
        src = torch.full((len(chunk), int(chunk.max()) + 1), pad, dtype=torch.long)
        for i, n in enumerate(chunk.tolist()):
            src[i, :n] = torch.randint(3, pad, (n,), generator=g)  # never eos (0), unk (1) or pad
            src[i, n] = 0  # </s>
        batches.append(src.to(device))
    config = DecodeConfig(beam_size=4, alpha=1.0, length_penalty="power", max_len=sizes.out_len, extra_len=10_000)
    generated: dict[str, int] = {}

    def run_ours() -> None:
        generated["aiayn"] = sum(
            len(hyps[0].tokens) for src in batches for hyps in beam_search(cpu.step_model(ours), src, config)
        )

    def run_hf() -> None:
        generated["Hugging Face"] = sum(
            (
                hf.generate(
                    input_ids=src,
                    attention_mask=src.ne(pad),
                    num_beams=4,
                    max_new_tokens=sizes.out_len,
                    min_new_tokens=sizes.out_len,
                    length_penalty=1.0,
                    do_sample=False,
                ).size(1)
                - 1
            )
            * src.size(0)
            for src in batches
        )

    same = agreement(ours, hf, batches[0], config, pad)
    runs = {"aiayn": run_ours, "Hugging Face": run_hf}
    times: dict[str, list[float]] = {name: [] for name in runs}
    with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16):
        for fn in runs.values():
            fn()  # warm-up
        for _ in range(sizes.rounds):
            for name, fn in runs.items():
                times[name].append(timed(device, fn))
    expected = sizes.sentences * sizes.out_len
    for name, n in generated.items():
        if n != expected:
            print(f"warning: {name} generated {n} tokens, not {expected}", file=sys.stderr)
    tok_s = {name: generated[name] / statistics.median(t) for name, t in times.items()}
    return [
        [
            f"translate beam 4, batch {sizes.mt_batch}, bf16: generated tok/s",
            f"{tok_s['aiayn']:,.0f}",
            f"{tok_s['Hugging Face']:,.0f}",
            f"{tok_s['aiayn'] / tok_s['Hugging Face']:.2f}x",
        ],
        ["translate, fp32: the same best output as HF", f"{same}/{batches[0].size(0)} sentences", "", ""],
    ]


@torch.inference_mode()
def agreement(ours: Transformer, hf, src: torch.Tensor, config: DecodeConfig, pad: int) -> int:
    """Sentences of one batch whose best fp32 hypothesis is the same in both engines (same weights)."""
    mine = [hyps[0].tokens for hyps in beam_search(cpu.step_model(ours), src, config)]
    theirs = hf.generate(
        input_ids=src,
        attention_mask=src.ne(pad),
        num_beams=4,
        max_new_tokens=config.max_len,
        min_new_tokens=config.max_len,
        length_penalty=1.0,
        do_sample=False,
    )[:, 1:].tolist()
    return sum(a == b for a, b in zip(mine, theirs))


def print_table(rows: list[list[str]]) -> None:
    header = ["job", "aiayn", "Hugging Face", "aiayn / HF"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="run every code path on the CPU at tiny sizes")
    parser.add_argument("--compile", action="store_true", help="also time training with torch.compile")
    args = parser.parse_args()
    if args.dry_run:
        device, sizes = torch.device("cpu"), DRY
        torch.set_num_threads(2)
    elif torch.cuda.is_available():
        device, sizes = torch.device("cuda"), GPU
    else:
        print("benchmarks/gpu.py: no CUDA device here; run it on a GPU machine (--dry-run checks it on the CPU)")
        return 0
    import transformers

    began = time.perf_counter()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (dry run, tiny sizes)"
    peak = matmul_rate(device, sizes.matmul)
    print(
        f"{name}; torch {torch.__version__}, transformers {transformers.__version__}; "
        f"measured bf16 matmul peak {peak / 1e12:.3g} TFLOP/s (n = {sizes.matmul})",
        flush=True,
    )
    rows = []
    for preset in sizes.presets:
        for compile_ in (False, True) if args.compile else (False,):
            rows += bench_training(preset, sizes, device, peak, compile_)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    rows += bench_translation(sizes, device)
    print_table(rows)
    print(f"{time.perf_counter() - began:.0f} s in all; medians of {sizes.rounds} alternating rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
