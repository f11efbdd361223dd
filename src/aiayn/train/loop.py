"""The training loop of §5: `train(recipe, out_dir)`, importable and readable top to bottom.

    OUT/recipe.yaml           the resolved recipe
    OUT/spm.model             the shared SentencePiece vocabulary (trained once)
    OUT/data/*.pt             the encoded corpus (encoded once; a resume reads it back)
    OUT/checkpoints/step-N/   model directory + state.pt; running again resumes from the latest
    OUT/model/                the final (averaged) model: what `Translator.load` reads
    OUT/tensorboard/          TensorBoard event files
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..data.batching import Batch, BatchStream, collate, make_batches
from ..data.corpus import EncodedCorpus, encode_pairs, find_file, read_parallel
from ..data.vocab import Vocab
from ..evaluate import tokenized_bleu
from ..io import load_model, save_model
from ..model import Transformer
from ..recipe import Recipe
from . import distributed, precision, progress
from .checkpoint import average_checkpoints, checkpoint_steps, latest_checkpoint, load_state, rng_state, save_checkpoint, set_rng_state
from .flops import train_flops
from .loss import label_smoothed_nll
from .schedule import rate
from .validate import sacrebleu_score, translate_texts, validation_loss

Log = Callable[[str], None]


@dataclass
class Start:
    """What training starts from: a model, its tokenizer and the vocabulary bytes stored with it."""

    model: Transformer
    tokenizer: object  # encode_source / encode_target / decode
    vocab_proto: bytes | None


def start_model(recipe: Recipe, out: Path, init: str | Path | None, log: Log) -> Start:
    """A fresh model with a vocabulary trained on the training text, or the model in `init`."""
    from ..io import is_aiayn_model

    if init is not None:
        if is_aiayn_model(init) and (Path(init) / "spm.model").is_file():
            vocab = Vocab.load(Path(init) / "spm.model")
            return Start(load_model(init).train(), vocab, vocab.proto)
        from ..marian import load_any  # issue 5: a Marian directory, or an aiayn one converted from Marian

        model, tokenizer, _ = load_any(init)
        return Start(model.train(), tokenizer, None)
    d = recipe.data
    vocab_path = out / "spm.model"
    if not vocab_path.is_file():
        if distributed.is_main():
            src, tgt = read_parallel(find_file(d.train, d.src_lang), find_file(d.train, d.tgt_lang))
            log(f"training a {d.vocab_size:,}-piece shared BPE vocabulary on {len(src):,} + {len(tgt):,} sentences")
            Vocab.train(src + tgt, d.vocab_size, seed_sentences=d.vocab_sample).save(vocab_path)
        distributed.barrier()
    vocab = Vocab.load(vocab_path)
    torch.manual_seed(recipe.train.seed)  # the same initial weights for the same seed
    return Start(Transformer(recipe.model_config(len(vocab))).train(), vocab, vocab.proto)


def load_split(recipe: Recipe, prefix: str, tokenizer, cache: Path, log: Log) -> EncodedCorpus:
    """A parallel split, encoded and length-filtered once, then read back from cache."""
    cached = cache.is_file()
    distributed.barrier()  # every rank has looked before rank 0 writes the cache
    if cached:
        return EncodedCorpus.load(cache)
    d = recipe.data
    src_path, tgt_path = find_file(prefix, d.src_lang), find_file(prefix, d.tgt_lang)
    src, tgt = read_parallel(src_path, tgt_path)
    corpus, report = encode_pairs(src, tgt, tokenizer.encode_source, tokenizer.encode_target, d.max_subwords)
    log(f"{src_path} / {tgt_path}: {report}")
    if distributed.is_main():
        cache.parent.mkdir(parents=True, exist_ok=True)
        corpus.save(cache)
    return corpus


def to_batch(corpus: EncodedCorpus, indices: list[int], model: Transformer, device: torch.device) -> Batch:
    b = collate([corpus.src[i] for i in indices], [corpus.tgt[i] for i in indices], model.config.pad_id, model.config.bos_id)
    return Batch(b.src.to(device), b.tgt_in.to(device), b.tgt_out.to(device), b.n_src, b.n_tgt)


def pick_device(name: str) -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else torch.device(name)


def accumulation_steps(recipe: Recipe, world_size: int) -> int:
    """Micro-batches per optimizer step: effective_batch_tokens / (batch_tokens x world size)."""
    t = recipe.train
    if not t.effective_batch_tokens:
        return 1
    return max(1, round(t.effective_batch_tokens / (t.batch_tokens * world_size)))


def train(recipe: Recipe, out_dir: str | Path, init: str | Path | None = None, log: Log = print) -> dict:
    """Train (or resume) the recipe into out_dir; return the final results (BLEU, steps, time)."""
    t, out = recipe.train, Path(out_dir)
    rank, world = distributed.rank(), distributed.world_size()
    main = distributed.is_main()
    log = log if main else (lambda _: None)
    device, joined = distributed.init(pick_device(t.device))  # torchrun: NCCL on GPUs, Gloo on CPUs
    if t.threads:
        torch.set_num_threads(t.threads)
    out.mkdir(parents=True, exist_ok=True)
    if main:
        recipe.dump(out / "recipe.yaml")
    start = start_model(recipe, out, init, log)
    model, tokenizer = start.model.to(device), start.tokenizer
    corpus = load_split(recipe, recipe.data.train, tokenizer, out / "data" / "train.pt", log)
    valid = load_split(recipe, recipe.data.valid, tokenizer, out / "data" / "valid.pt", log)
    valid_batches = [to_batch(valid, b, model, device) for b in make_batches(
        [len(s) for s in valid.src], [len(s) for s in valid.tgt], t.batch_tokens, 0, 0)]
    # Batches of batch_tokens whatever the world size: a step takes accum x world of them and each rank
    # every world-th, so the data order and the checkpoint's position do not depend on the world size.
    stream = BatchStream([len(s) for s in corpus.src], [len(s) for s in corpus.tgt], t.batch_tokens, t.seed)
    accum = accumulation_steps(recipe, world)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=(t.beta1, t.beta2), eps=t.adam_eps, fused=True)
    dtype = precision.autocast_dtype(t.bf16, t.fp16)  # None = fp32, as in the paper
    precision.check_device(device, dtype)
    scaler = precision.grad_scaler(device, dtype)  # active for fp16 only
    step, elapsed, flops, tokens = 0, 0.0, 0.0, 0
    checkpoints = out / "checkpoints"
    if (last := latest_checkpoint(checkpoints)) is not None:
        step, elapsed, flops, tokens = resume(last, model, optimizer, stream, device, scaler)
        log(f"resumed from {last} (step {step:,}, {elapsed / 60:.1f} min, epoch {stream.state_dict()['epoch']})")
    else:
        torch.manual_seed(t.seed + rank), random.seed(t.seed), np.random.seed(t.seed)
    if t.compile:
        model.compile()  # in place: the state dict keeps its names
    net = distributed.wrap(model, device)  # DDP with several ranks; save and evaluate `model`, the unwrapped one
    log(f"{model.num_parameters():,} parameters; {len(corpus):,} pairs, {len(stream)} batches an epoch; "
        f"{accum} micro-batch(es) of {t.batch_tokens:,} tokens per step x {world} process(es); device {device}")
    writer = tensorboard_writer(out) if main else None
    bar = progress.ProgressBar(t, step, elapsed, stream.epochs_done, disable=not main)  # toward the nearest limit
    saved_at, began, tokens_before = step, time.perf_counter() - elapsed, tokens
    model.train()
    try:
        while not distributed.any_rank(stop(recipe, step, time.perf_counter() - began, stream.epochs_done), device):
            # 1. the learning rate of eq. (3)
            lr = rate(step + 1, model.config.d_model, t.warmup_steps, t.lr_factor)
            for group in optimizer.param_groups:
                group["lr"] = lr
            # 2. micro-batches: each rank's share; loss divided by the target tokens of the whole step
            step_batches = [stream.next() for _ in range(accum * world)]  # the same for any world size
            batches = [to_batch(corpus, ids, model, device) for ids in step_batches[rank::world]]  # r, r + world, ...
            n_tokens = distributed.all_reduce_sum(sum(b.n_tgt for b in batches), device)  # real target tokens
            loss_sum = 0.0
            for i, b in enumerate(batches):
                # all-reduce the gradients once, after the last micro-batch (DDP's no_sync before it)
                with distributed.no_sync(net, i < len(batches) - 1), precision.autocast(device, dtype):
                    logits = net(b.src, b.tgt_in)
                loss, _, _ = label_smoothed_nll(logits, b.tgt_out, t.label_smoothing, model.config.pad_id)
                scaler.scale(loss * world / n_tokens).backward()  # DDP averages gradients over ranks; undo that
                loss_sum += loss.item()
                flops += train_flops(model.config, *b.src.shape, b.tgt_in.size(1)) * world
            # 3. clip, step, clear
            if t.clip_norm > 0:
                scaler.unscale_(optimizer)  # fp16: clip the true gradients
                torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip_norm)
            scaler.step(optimizer)  # fp16: skipped when a gradient overflowed; else optimizer.step()
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            # 4. log, evaluate and checkpoint at intervals
            n_src = distributed.all_reduce_sum(sum(b.n_src for b in batches), device)  # real source tokens
            step_loss = distributed.all_reduce_sum(loss_sum, device) / n_tokens  # all ranks' loss per target token
            tokens += n_src + n_tokens  # source + target, padding excluded
            rate_now = (tokens - tokens_before) / max(time.perf_counter() - began - elapsed, 1e-9)
            bar.update(step, time.perf_counter() - began, stream.epochs_done, loss=f"{step_loss:.3f}", lr=f"{lr:.2e}",
                       batch=f"{n_src:,.0f}+{n_tokens:,.0f}", tok_s=f"{rate_now:,.0f}")
            if writer and step % t.log_every == 0:
                for name, value in (("loss", step_loss), ("lr", lr), ("tokens_per_s", rate_now), ("src_tokens", n_src),
                                    ("tgt_tokens", n_tokens), ("matmul_flops", flops)):
                    writer.add_scalar(f"train/{name}", value, step)
            if main and t.eval_every and step % t.eval_every == 0:
                evaluate(model, tokenizer, recipe, valid, valid_batches, device, writer, step, log)
            if t.save_every and step % t.save_every == 0:
                save(checkpoints, step, model, start, optimizer, stream, time.perf_counter() - began, flops, tokens,
                     t.keep_checkpoints, scaler)
                saved_at = step
    except KeyboardInterrupt:
        log(f"\ninterrupted at step {step:,}: saving a checkpoint and evaluating (Ctrl-C again to quit)")
    bar.close()
    elapsed = time.perf_counter() - began
    if step > saved_at:
        save(checkpoints, step, model, start, optimizer, stream, elapsed, flops, tokens, t.keep_checkpoints, scaler)
    log(f"trained {step:,} steps in {elapsed / 60:.1f} min on {world} process(es); {flops:.3g} FLOPs in the training "
        f"steps' matrix products (counted from the shapes, padding included)")
    distributed.close(joined)  # the rest (averaging, the test set) is rank 0's alone
    if not main:
        return {}
    results = finish(recipe, out, start, device, log)
    results.update(steps=step, minutes=elapsed / 60, device_seconds=elapsed * world, matmul_flops=flops, tokens=tokens,
                   epoch=stream.epoch, epochs_done=stream.epochs_done,
                   tokens_per_s=tokens / max(elapsed, 1e-9))
    (out / "results.json").write_text(json.dumps(results, indent=2))
    if writer:
        writer.close()
    return results


def stop(recipe: Recipe, step: int, seconds: float, epochs: float) -> bool:
    """max_steps, max_minutes or max_epochs reached; epochs counts finished ones and the current one's fraction."""
    return progress.stop(recipe.train, step, seconds, epochs)


def save(directory: Path, step: int, model: Transformer, start: Start, optimizer, stream: BatchStream,
         elapsed: float, flops: float, tokens: int, keep: int, scaler: torch.amp.GradScaler | None = None) -> None:
    """Rank 0 writes checkpoints/step-N with everything an exact resume needs."""
    if distributed.is_main():
        state = {"step": step, "optimizer": optimizer.state_dict(), "rng": rng_state(),
                 "data": stream.state_dict(), "elapsed": elapsed, "flops": flops, "tokens": tokens,
                 "scaler": scaler.state_dict() if scaler is not None else {}}  # fp16's loss scale; {} otherwise
        save_checkpoint(directory, step, model, start.vocab_proto, state, keep)
    distributed.barrier()


def resume(checkpoint: Path, model: Transformer, optimizer, stream: BatchStream, device: torch.device,
           scaler: torch.amp.GradScaler | None = None) -> tuple[int, float, float, int]:
    """Restore weights, optimizer, RNG and data position; return (step, elapsed seconds, FLOPs, tokens)."""
    from safetensors.torch import load_model as load_weights

    load_weights(model, str(checkpoint / "model.safetensors"), device=str(device))
    state = load_state(checkpoint)
    optimizer.load_state_dict(state["optimizer"])
    stream.load_state_dict(state["data"])
    set_rng_state(state["rng"])
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    return state["step"], state["elapsed"], state["flops"], state["tokens"]


def tensorboard_writer(out: Path):
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(out / "tensorboard"))


def evaluate(model: Transformer, tokenizer, recipe: Recipe, valid: EncodedCorpus, valid_batches: list[Batch],
             device: torch.device, writer, step: int, log: Log) -> None:
    """Validation loss, per-word-piece perplexity and (optionally) BLEU on part of the validation set."""
    t = recipe.train
    v = validation_loss(model, valid_batches, t.label_smoothing, device, t.bf16)
    text = f"step {step:,}: valid loss {v.loss:.3f}, nll {v.nll:.3f}, perplexity {v.perplexity:.2f}"
    if writer:
        writer.add_scalar("valid/loss", v.loss, step)
        writer.add_scalar("valid/perplexity", v.perplexity, step)
    if t.eval_bleu:
        d = recipe.data
        src, ref = read_parallel(find_file(d.valid, d.src_lang), find_file(d.valid, d.tgt_lang))
        n = t.bleu_sentences or len(src)
        hyp = translate_texts(model, tokenizer, src[:n], t.beam_size, t.alpha, device)
        bleu, _ = sacrebleu_score(hyp, ref[:n])
        text += f", BLEU {bleu:.2f} ({n} sentences)"
        if writer:
            writer.add_scalar("valid/bleu", bleu, step)
    log(text)


def finish(recipe: Recipe, out: Path, start: Start, device: torch.device, log: Log) -> dict:
    """Average the last checkpoints into OUT/model, then translate the test set and score it."""
    t, d = recipe.train, recipe.data
    last = [path for _, path in checkpoint_steps(out / "checkpoints")][-max(t.average_last, 1):]
    if not last:
        return {}
    average_checkpoints(last, out / "model")
    if start.vocab_proto is None:  # a Marian tokenizer (--init): its own files, so Translator.load reads OUT/model
        from ..marian.convert import save_tokenizer

        save_tokenizer(start.tokenizer, out / "model")
    log(f"{out / 'model'}: the mean of {len(last)} checkpoint(s): {', '.join(p.name for p in last)}")
    model = load_model(out / "model", device)
    results: dict = {"averaged": [p.name for p in last]}
    if d.test:
        src, ref = read_parallel(find_file(d.test, d.src_lang), find_file(d.test, d.tgt_lang))
        began = time.perf_counter()
        hyp = translate_texts(model, start.tokenizer, src, t.beam_size, t.alpha, device)
        bleu, signature = sacrebleu_score(hyp, ref)
        tokenized = tokenized_bleu(hyp, ref, d.tgt_lang)  # the paper's way (tensor2tensor's get_ende_bleu.sh)
        for s, h, r in list(zip(src, hyp, ref))[:3]:
            log(f"  source     {s}\n  reference  {r}\n  aiayn      {h}")
        log(f"test BLEU {bleu:.2f} on {len(src):,} sentences of {d.test} ({signature}), decoded in "
            f"{time.perf_counter() - began:.0f} s; tokenised BLEU {tokenized.score:.2f} ({tokenized.signature})")
        results.update(test_bleu=bleu, signature=signature, test_tokenized_bleu=tokenized.score,
                       tokenized_signature=tokenized.signature, test=d.test)
        (out / "test.hyp").write_text("\n".join(hyp) + "\n")
    return results
