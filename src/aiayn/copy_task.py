"""The copy task: the smallest sequence-to-sequence problem, for tests and a first demo.

Random sequences of `length` symbols from an alphabet of `n_symbols` are copied from source to
target. A tiny Transformer learns it in about a minute on two CPU cores.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import Tensor

from .config import ModelConfig
from .decode.greedy import greedy_search
from .model import Transformer
from .train.loss import label_smoothed_nll
from .train.schedule import rate

N_SPECIAL = 4  # pad, bos, eos, unk come first (ModelConfig defaults)


def copy_batch(
    batch_size: int, length: int, n_symbols: int, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """(src, tgt_in, tgt_out), each (B, length + 1): src ends in </s>, tgt_in starts with <s>."""
    cfg = ModelConfig()
    symbols = torch.randint(N_SPECIAL, N_SPECIAL + n_symbols, (batch_size, length), generator=generator)
    eos = torch.full((batch_size, 1), cfg.eos_id)
    bos = torch.full((batch_size, 1), cfg.bos_id)
    return torch.cat([symbols, eos], 1), torch.cat([bos, symbols], 1), torch.cat([symbols, eos], 1)


def train_copy(
    steps: int = 1000,
    length: int = 10,
    n_symbols: int = 11,
    batch_size: int = 64,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> Transformer:
    """Train the tiny preset on fresh random batches with Adam and eq. (3); return it in eval mode."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = ModelConfig.preset("tiny", vocab_size=N_SPECIAL + n_symbols, p_drop=0.0, max_len=64)
    model = Transformer(config)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    start = time.perf_counter()
    for step in range(1, steps + 1):
        for group in opt.param_groups:
            group["lr"] = rate(step, config.d_model, warmup_steps=200, factor=1.0)
        src, tgt_in, tgt_out = copy_batch(batch_size, length, n_symbols, gen)
        loss, _, n_tokens = label_smoothed_nll(model(src, tgt_in), tgt_out, 0.1, config.pad_id)
        opt.zero_grad(set_to_none=True)
        (loss / n_tokens).backward()
        opt.step()
        if log and (step % 100 == 0 or step == steps):
            log(f"step {step:4d}  loss {loss.item() / n_tokens:.3f}  {time.perf_counter() - start:.0f}s")
    return model.eval()


def copy_accuracy(model: Transformer, n: int = 100, length: int = 10, n_symbols: int = 11, seed: int = 12345) -> float:
    """Share of n held-out sequences that greedy decoding copies exactly."""
    src, _, tgt_out = copy_batch(n, length, n_symbols, torch.Generator().manual_seed(seed))
    hyp = greedy_search(model, src, max_len=length + 1)
    return (hyp[:, : length + 1] == tgt_out).all(dim=1).float().mean().item()
