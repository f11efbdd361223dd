"""The training loop of §5: `train(recipe, out_dir)`, importable and readable top to bottom.

OUT/run.json              what marks a run folder: the recipe it runs (aiayn.train.run_folder)
OUT/recipe.yaml           the resolved recipe (recipe.resolved.yaml when recipe.yaml is the user's)
OUT/spm.model             the shared SentencePiece vocabulary (trained once), unless data.vocab names one
OUT/data/train/, valid/    the token stores: the encoded splits, memory-mapped (aiayn.data.store)
OUT/checkpoints/step-N/   model directory + training state; running again resumes from the latest
OUT/model/                the final (averaged) model: what `Translator.load` reads
OUT/tensorboard/          TensorBoard event files
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .. import faults
from ..config import ModelConfig
from ..data.batching import Batch, BatchStream, corpus_batch, make_batches, rank_share
from ..data.bpe_dropout import SampledEpochs
from ..data.sources import Source
from ..data.store import Corpus, TokenStore, prepare, store_key
from ..data.vocab import Vocab
from ..evaluate import tokenized_bleu
from ..files import sweep_temporaries
from ..model import Transformer
from ..recipe import Recipe, TrainConfig
from ..translator import load_for_decoding
from ..weights import load_model, write_atomic
from . import distributed, precision, progress, run_folder
from .checkpoint import Checkpoints, TrainState, average_checkpoints, checkpoints_to_average
from .flops import train_flops
from .interrupt import deferred_sigint
from .schedule import MIN_PLAN_STEPS, PLAN_AFTER, cooldown_begins, plan_steps, rate, shortest_run
from .step import for_this_machine
from .validate import sacrebleu_score, translate_texts, validation_loss

Log = Callable[[str], None]


@dataclass
class Start:
    """What training starts from: a model, its tokenizer and the vocabulary bytes stored with it."""

    model: Transformer
    tokenizer: object  # encode_source / encode_target / decode
    vocab_proto: bytes | None


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam with β1, β2, ε of §5.3 (the rate is set each step, eq. 3). With `weight_decay` (not in the
    paper), AdamW's decoupled decay (Loshchilov & Hutter, 2019) shrinks the weight matrices by lr x
    weight_decay a step; biases, LayerNorm gains and the like are left alone, as is usual."""
    betas, eps = (cfg.beta1, cfg.beta2), cfg.adam_eps
    if cfg.weight_decay == 0:
        return torch.optim.Adam(model.parameters(), lr=0.0, betas=betas, eps=eps, fused=True)
    params = list(model.parameters())
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=0.0, betas=betas, eps=eps, fused=True)


def apply_optimizer_settings(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> None:
    """The recipe's β1, β2, ε and weight decay on the optimizer, after a checkpoint's settings were loaded
    with its state: a resume may change them (not switch weight decay on or off: `run_folder.changes`)."""
    for group in optimizer.param_groups:
        group["betas"], group["eps"] = (cfg.beta1, cfg.beta2), cfg.adam_eps
        if group["weight_decay"]:  # the matrices' group; the others keep 0
            group["weight_decay"] = cfg.weight_decay


def report_unused_model_fields(recipe: Recipe, config: ModelConfig, init: str | Path, log: Log) -> None:
    """With --init, the model's sizes are init's: say which of the recipe's model fields are not used."""
    try:
        wanted = recipe.model_config(config.vocab_size).to_dict()
    except ValueError:  # a model section that names no whole model by itself: nothing to compare
        return
    own = (
        "vocab_size",
        "tgt_vocab_size",
        "pad_id",
        "bos_id",
        "eos_id",
        "unk_id",
        "src_lang",
        "tgt_lang",
    )  # the vocabulary's
    unused = [
        f"{name} {wanted[name]!r} (init's: {value!r})"
        for name, value in config.to_dict().items()
        if name in wanted and name not in own and wanted[name] != value
    ]
    if unused:
        log(f"--init {init}: the model is init's; the recipe's model fields {'; '.join(unused)} are not used")


def start_model(recipe: Recipe, out: Path, init: str | Path | None, log: Log) -> Start:
    """A fresh model with a vocabulary trained on the training text, or the model in `init`."""
    from ..weights import is_aiayn_model

    if init is not None:
        if is_aiayn_model(init) and (Path(init) / "spm.model").is_file():
            vocab = Vocab.load(Path(init) / "spm.model")
            start = Start(load_model(init).train(), vocab, vocab.proto)
        else:
            from ..model_folder import load_any  # a Marian directory, or an aiayn one converted from Marian

            model, tokenizer, _ = load_any(init)
            start = Start(model.train(), tokenizer, None)
        report_unused_model_fields(recipe, start.model.config, init, log)
        return start
    if recipe.data.format == "ptb":  # a parser, with a target vocabulary of whole tree symbols
        from .parsing import start_parser

        return Start(*start_parser(recipe, out, log), None)
    d = recipe.data
    vocab_path = Path(d.vocab) if d.vocab else out / "spm.model"
    if d.vocab and not vocab_path.is_file():
        raise FileNotFoundError(f"data.vocab {d.vocab}: no such file")
    if not vocab_path.is_file():
        if distributed.is_main():
            source = Source(d.train, d.src_lang, d.tgt_lang, "data.train")
            log(
                f"training a {d.vocab_size:,}-piece shared BPE vocabulary on a sample of {d.vocab_sample:,} sentences of {source}"
            )
            faults.point("vocab.before-train")
            vocab = Vocab.train(source.sentences(), d.vocab_size, seed_sentences=d.vocab_sample)  # streamed
            faults.point("vocab.after-train")
            vocab.save(vocab_path)
        distributed.wait_for_rank_0()
    vocab = Vocab.load(vocab_path)
    torch.manual_seed(recipe.train.seed)  # the same initial weights for the same seed
    return Start(Transformer(recipe.model_config(len(vocab))).train(), vocab, vocab.proto)


def load_split(
    recipe: Recipe, spec: str | dict, tokenizer, vocab_size: int, folder: Path, log: Log, field: str = "data"
) -> Corpus:
    """A split's token store: encoded and length-filtered once by rank 0 (aiayn.data.store), then opened by every
    rank, memory-mapped; rebuilt when its key (the source, the tokenizer, the length limit) has changed."""
    d = recipe.data
    if d.format == "ptb":  # sentences and linearised trees from a file range of the treebank
        from ..parse.data import TreebankSource

        source = TreebankSource(d, spec)
    else:
        source = Source(spec, d.src_lang, d.tgt_lang, field)
    if distributed.is_main():  # the key reads the source (a dataset is loaded): rank 0's alone
        key = store_key(source, tokenizer, d.max_subwords)
        if not TokenStore.is_built(folder, key):
            prepare(source, tokenizer, vocab_size, d.max_subwords, folder, key, d.workers, log)
            faults.point("store.after-prepare")
    distributed.wait_for_rank_0()  # rank 0's store is whole before any rank opens it
    return TokenStore(folder)


def sampled_epochs(recipe: Recipe, corpus: Corpus, tokenizer) -> SampledEpochs | None:
    """data.bpe_dropout's per-epoch segmentations of the training pairs; None when it is 0 (every epoch is `corpus`)."""
    d = recipe.data
    if not d.bpe_dropout:
        return None
    if not isinstance(tokenizer, Vocab):
        raise ValueError(
            "data.bpe_dropout needs aiayn's shared SentencePiece vocabulary; "
            "this model's tokenizer (a Marian model's, from --init) has none"
        )
    return SampledEpochs(corpus, tokenizer, d.bpe_dropout, recipe.train.seed, d.max_subwords)


def to_batch(corpus: Corpus, rows: np.ndarray, model: Transformer, device: torch.device) -> Batch:
    b = corpus_batch(corpus, rows, model.config.pad_id, model.config.bos_id)
    return Batch(b.src.to(device), b.tgt_in.to(device), b.tgt_out.to(device), b.n_src, b.n_tgt)


def pick_device(name: str) -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else torch.device(name)


def accumulation_steps(recipe: Recipe, world_size: int) -> int:
    """Micro-batches per optimizer step: effective_batch_tokens / (batch_tokens x world size)."""
    cfg = recipe.train
    if not cfg.effective_batch_tokens:
        return 1
    return max(1, round(cfg.effective_batch_tokens / (cfg.batch_tokens * world_size)))


def train(
    recipe: Recipe,
    out_dir: str | Path,
    init: str | Path | None = None,
    log: Log = print,
    recipe_file: str | Path | None = None,
) -> dict:
    """Train (or resume) the recipe into out_dir; return the final results (BLEU, steps, time).

    recipe_file: the YAML file the recipe came from, which is never written over.
    """
    out = Path(out_dir)
    held = None
    if distributed.is_main():  # the ranks of one torchrun job are one run: rank 0 holds the lock
        run_folder.check(out, recipe, recipe_file)  # before anything is written; again under the lock
        out.mkdir(parents=True, exist_ok=True)
        held = run_folder.lock(out)
        run_folder.check(out, recipe, recipe_file, locked=True)
        sweep_temporaries(out)  # what a killed run left half-written; the lock keeps other writers out
        run_folder.record(out, recipe, recipe_file)
    try:
        return _train(recipe, out, init, log)
    finally:
        if held is not None:
            held.close()


def _train(recipe: Recipe, out: Path, init: str | Path | None, log: Log) -> dict:
    cfg = recipe.train
    rank, world = distributed.rank(), distributed.world_size()
    main = distributed.is_main()
    log = log if main else (lambda _: None)
    device, joined = distributed.init(pick_device(cfg.device))  # torchrun: NCCL on GPUs, Gloo on CPUs
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    start = start_model(recipe, out, init, log)
    model = start.model.to(device)
    vocab_size = max(model.config.vocab_size, model.config.target_vocab_size)  # the largest id either side
    corpus = load_split(
        recipe, recipe.data.train, start.tokenizer, vocab_size, out / "data" / "train", log, "data.train"
    )
    valid = load_split(
        recipe, recipe.data.valid, start.tokenizer, vocab_size, out / "data" / "valid", log, "data.valid"
    )
    valid_batches = [
        to_batch(valid, b, model, device)
        for b in make_batches(valid.src.lengths(), valid.tgt.lengths(), cfg.batch_tokens, 0, 0)
    ]
    # Batches of batch_tokens whatever the world size: a step takes accum x world of them and each rank
    # every world-th, so the data order and the checkpoint's position do not depend on the world size.
    sampled = sampled_epochs(recipe, corpus, start.tokenizer)  # BPE-dropout: each epoch its own ids
    pairs = sampled.corpus if sampled else (lambda epoch: corpus)  # epoch -> its Corpus
    stream = BatchStream(
        corpus.src.lengths(),
        corpus.tgt.lengths(),
        cfg.batch_tokens,
        cfg.seed,
        sampled.lengths if sampled else None,
    )
    accum = accumulation_steps(recipe, world)
    optimizer = make_optimizer(model, cfg)
    dtype = precision.autocast_dtype(cfg.bf16, cfg.fp16, device)  # None = fp32, as in the paper
    precision.check_device(device, dtype)
    scaler = precision.grad_scaler(device, dtype)  # active for fp16 only
    checkpoints = Checkpoints(
        out / "checkpoints",
        model,
        start.vocab_proto,
        optimizer,
        stream,
        scaler,
        cfg.keep_checkpoints,
        {"beam_size": cfg.beam_size, "alpha": cfg.alpha},
    )
    if (last := checkpoints.latest()) is not None:
        state = checkpoints.resume(last, device, cfg.seed)
        apply_optimizer_settings(optimizer, cfg)
        log(f"resumed from {last} (step {state.step:,}, {state.elapsed / 60:.1f} min, epoch {stream.epoch})")
    else:
        state = TrainState()
        torch.manual_seed(cfg.seed + rank), random.seed(cfg.seed), np.random.seed(cfg.seed)
    step = for_this_machine(model, cfg, device, dtype, state.gemm)  # how a step computes here, as the paper's
    state.gemm = step.gemm  # the float32 products' backend, kept in checkpoints: a resumed run computes the same
    if cfg.compile:
        model.compile()  # in place: the state dict keeps its names
    net = distributed.wrap(model, device)  # DDP with several ranks; save and evaluate `model`, the unwrapped one
    log(
        f"{model.num_parameters():,} parameters; {len(corpus):,} pairs, {len(stream)} batches an epoch; "
        f"{accum} micro-batch(es) of {cfg.batch_tokens:,} tokens per step x {world} process(es); device {device}, "
        f"{'fp32' if dtype is None else str(dtype).removeprefix('torch.') + ' autocast'}, attention kernel {cfg.attention}"
        f"{', fp32 products on ' + state.gemm if dtype is None and device.type == 'cpu' else ''}"
    )
    writer = tensorboard_writer(out) if main else None
    bar = progress.ProgressBar(cfg, state.step, state.elapsed, stream.epochs_done, disable=not main)  # nearest limit
    saved_at, began, tokens_before = state.step, time.perf_counter() - state.elapsed, state.tokens
    started = time.perf_counter()  # this process's start: tokens/s counts what it trained (save moves state.elapsed)
    if state.planned_minutes != cfg.max_minutes or not cfg.cooldown:  # a new time budget, or none, or no cool-down:
        state.planned_steps, state.planned_minutes = 0, 0.0  # the cool-down is planned anew (or not at all)
    clock = None  # (time, step) at the end of this process's first step: the speed that plans the cool-down
    model.train()
    with deferred_sigint() as ctrl_c, bar:  # Ctrl-C stops at the next step boundary; the bar closes on errors too
        while not distributed.any_rank(
            ctrl_c.requested
            or stop(recipe, state.step, time.perf_counter() - began, stream.epochs_done, state.planned_steps),
            device,
        ):
            # 1. the learning rate of eq. (3), and the cool-down of a run whose length is known (or planned)
            lr = rate(
                state.step + 1,
                model.config.d_model,
                cfg.warmup_steps,
                cfg.lr_factor,
                run_steps(cfg, state),
                cfg.cooldown,
            )
            for group in optimizer.param_groups:
                group["lr"] = lr
            # 2. micro-batches: each rank's share; loss divided by the target tokens of the whole step
            step_batches = stream.step(accum * world)  # the same for any world size
            batches = [
                to_batch(pairs(epoch), rows, model, device) for rows, epoch in rank_share(step_batches, rank, world)
            ]
            n_tokens = distributed.all_reduce_sum(sum(b.n_tgt for b in batches), device)  # real target tokens
            loss_sum = 0.0
            for i, b in enumerate(batches):
                # all-reduce the gradients once, after the last micro-batch (DDP's no_sync before it)
                length = max(b.src.size(1), b.tgt_in.size(1))
                with (
                    distributed.no_sync(net, i < len(batches) - 1),
                    step.forward(length),
                ):
                    hidden = net(b.src, b.tgt_in, project=False)  # (B, T, D): the projection is in the loss
                loss, _, _ = step.loss(hidden, model, b.tgt_out, cfg.label_smoothing)
                scaler.scale(loss * world / n_tokens).backward()  # DDP averages gradients over ranks; undo that
                loss_sum += loss.item()
                state.flops += train_flops(model.config, *b.src.shape, b.tgt_in.size(1)) * world
            faults.point("train.after-backward")
            # 3. clip, step, clear
            if cfg.clip_norm > 0:
                scaler.unscale_(optimizer)  # fp16: clip the true gradients
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
            scaler.step(optimizer)  # fp16: skipped when a gradient overflowed; else optimizer.step()
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            state.step += 1
            faults.point("train.after-step")
            if cfg.cooldown and cfg.max_minutes:  # a time budget: how many steps it holds, until the cool-down begins
                if clock is None:  # the first step (allocation, compilation) does not count toward the speed
                    clock = (time.perf_counter(), state.step)
                else:
                    plan_cooldown(cfg, state, began, clock, device, log)
            # 4. log, evaluate and checkpoint at intervals
            n_src = distributed.all_reduce_sum(sum(b.n_src for b in batches), device)  # real source tokens
            step_loss = distributed.all_reduce_sum(loss_sum, device) / n_tokens  # all ranks' loss per target token
            state.tokens += n_src + n_tokens  # source + target, padding excluded
            rate_now = (state.tokens - tokens_before) / max(time.perf_counter() - started, 1e-9)
            bar.update(
                state.step,
                time.perf_counter() - began,
                stream.epochs_done,
                loss=f"{step_loss:.3f}",
                lr=f"{lr:.2e}",
                batch=f"{n_src:,.0f}+{n_tokens:,.0f}",
                tok_s=f"{rate_now:,.0f}",
            )
            if writer and state.step % cfg.log_every == 0:
                for name, value in (
                    ("loss", step_loss),
                    ("lr", lr),
                    ("tokens_per_s", rate_now),
                    ("src_tokens", n_src),
                    ("tgt_tokens", n_tokens),
                    ("matmul_flops", state.flops),
                ):
                    writer.add_scalar(f"train/{name}", value, state.step)
            if main and cfg.eval_every and state.step % cfg.eval_every == 0:
                evaluate(model, start.tokenizer, recipe, valid, valid_batches, device, writer, state.step, log)
            if cfg.save_every and state.step % cfg.save_every == 0:
                checkpoints.save(state, time.perf_counter() - began)
                saved_at = state.step
    elapsed = time.perf_counter() - began
    if ctrl_c.requested:
        log(f"interrupted at step {state.step:,}: saving a checkpoint and evaluating (Ctrl-C again to quit)")
    if state.step > saved_at:
        checkpoints.save(state, elapsed)
    log(
        f"trained {state.step:,} steps in {elapsed / 60:.1f} min on {world} process(es); {state.flops:.3g} FLOPs in the "
        f"training steps' matrix products (counted from the shapes, padding included)"
    )
    distributed.close(joined)  # the rest (averaging, the test set) is rank 0's alone
    if not main:
        return {}
    results = finish(recipe, out, start, device, log)
    results.update(
        steps=state.step,
        minutes=elapsed / 60,
        device_seconds=elapsed * world,
        matmul_flops=state.flops,
        tokens=state.tokens,
        epoch=stream.epoch,
        epochs_done=stream.epochs_done,
        tokens_per_s=state.tokens / max(elapsed, 1e-9),
    )
    write_atomic(out / "results.json", json.dumps(results, indent=2).encode(), fault="results")
    faults.point("final.after-results")
    if writer:
        writer.close()
    return results


def stop(recipe: Recipe, step: int, seconds: float, epochs: float, planned_steps: int = 0) -> bool:
    """max_steps, max_minutes, max_epochs or the planned steps reached; epochs counts finished ones and the current
    one's fraction."""
    return progress.stop(recipe.train, step, seconds, epochs) or 0 < planned_steps <= step


def run_steps(cfg: TrainConfig, state: TrainState) -> int:
    """The run's length in steps for the cool-down: max_steps, or fewer where a time budget's plan says so."""
    return min(state.planned_steps or cfg.max_steps, cfg.max_steps)


def plan_cooldown(
    cfg: TrainConfig, state: TrainState, began: float, clock: tuple[float, int], device: torch.device, log: Log
) -> None:
    """The steps the time budget holds, at this process's speed since `clock` (time, step): planned once
    PLAN_AFTER of the budget and MIN_PLAN_STEPS steps have passed, planned again at each checkpoint until the
    cool-down begins, then kept. A new plan never puts a step already taken inside the cool-down (those steps had
    eq. (3)'s rate), and it is the ranks' mean, so every rank has the same plan; the budget still ends the run
    if it comes first."""
    total = run_steps(cfg, state)
    if state.step > cooldown_begins(total, cfg.cooldown):  # cooling down: the plan stands
        return
    planned, now = state.planned_steps, time.perf_counter()
    since, from_step = clock
    left = cfg.max_minutes * 60 - (now - began)
    if planned:  # a step count, the same on every rank
        due = bool(cfg.save_every) and state.step % cfg.save_every == 0
    else:  # each rank reads its own clock: all plan at the step where any is due
        due = distributed.any_rank(
            state.step - from_step >= MIN_PLAN_STEPS
            and now - since >= min(PLAN_AFTER * cfg.max_minutes * 60, left / 2),
            device,
        )
    if not due:
        return
    steps = plan_steps(state.step - from_step, now - since, left + (now - since), cfg.max_steps - from_step)
    steps = round(distributed.all_reduce_sum(steps, device) / distributed.world_size())
    state.planned_steps = max(from_step + steps, shortest_run(state.step, cfg.cooldown))
    state.planned_minutes = cfg.max_minutes
    if not planned:
        log(
            f"the time budget holds about {state.planned_steps:,} steps at this speed (planned again at each "
            f"checkpoint): the rate falls to 0 over the last {cfg.cooldown:.0%} of them (train.cooldown)"
        )


def tensorboard_writer(out: Path):
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(out / "tensorboard"))


def evaluate(
    model: Transformer,
    tokenizer,
    recipe: Recipe,
    valid: Corpus,
    valid_batches: list[Batch],
    device: torch.device,
    writer,
    step: int,
    log: Log,
) -> None:
    """Validation loss, per-word-piece perplexity and (optionally) BLEU on part of the validation set."""
    cfg = recipe.train
    v = validation_loss(model, valid_batches, cfg.label_smoothing, device)  # fp32: comparable across runs
    text = f"step {step:,}: valid loss {v.loss:.3f}, nll {v.nll:.3f}, perplexity {v.perplexity:.2f}"
    if writer:
        writer.add_scalar("valid/loss", v.loss, step)
        writer.add_scalar("valid/perplexity", v.perplexity, step)
    if cfg.eval_bleu:
        d = recipe.data
        src, ref = Source(d.valid, d.src_lang, d.tgt_lang, "data.valid").read()
        n = cfg.bleu_sentences or len(src)
        hyp = translate_texts(model, tokenizer, src[:n], cfg.beam_size, cfg.alpha, device)
        bleu, _ = sacrebleu_score(hyp, ref[:n])
        text += f", BLEU {bleu:.2f} ({n} sentences)"
        if writer:
            writer.add_scalar("valid/bleu", bleu, step)
    log(text)


def finish(recipe: Recipe, out: Path, start: Start, device: torch.device, log: Log) -> dict:
    """Average the last checkpoints into OUT/model, then translate the test set and score it."""
    cfg, d = recipe.train, recipe.data
    last = checkpoints_to_average(out / "checkpoints", max(cfg.average_last, 1), cfg.save_every, cfg.average_share)
    if not last:
        return {}
    # a Marian tokenizer (--init) or a parser's: its own files, so that Translator.load reads OUT/model
    average_checkpoints(last, out / "model", start.tokenizer if start.vocab_proto is None else None)
    faults.point("final.after-average")
    log(f"{out / 'model'}: the mean of {len(last)} checkpoint(s): {', '.join(p.name for p in last)}")
    model = load_for_decoding(out / "model", device)  # only decoded from here on: laid out for it
    results: dict = {"averaged": [p.name for p in last]}
    if d.test and d.format == "ptb":  # a parser: parse the test sentences, score the trees with EVALB's rules
        from .parsing import test_parser

        results.update(test_parser(model, start.tokenizer, recipe, out, device, log))
    elif d.test:
        src, ref = Source(d.test, d.src_lang, d.tgt_lang, "data.test").read()
        began = time.perf_counter()
        hyp = translate_texts(model, start.tokenizer, src, cfg.beam_size, cfg.alpha, device)
        bleu, signature = sacrebleu_score(hyp, ref)
        tokenized = tokenized_bleu(hyp, ref, d.tgt_lang)  # the paper's way (tensor2tensor's get_ende_bleu.sh)
        for s, h, r in list(zip(src, hyp, ref))[:3]:
            log(f"  source     {s}\n  reference  {r}\n  aiayn      {h}")
        log(
            f"test BLEU {bleu:.2f} on {len(src):,} sentences of {d.test} ({signature}), decoded in "
            f"{time.perf_counter() - began:.0f} s; tokenised BLEU {tokenized.score:.2f} ({tokenized.signature})"
        )
        results.update(
            test_bleu=bleu,
            signature=signature,
            test_tokenized_bleu=tokenized.score,
            tokenized_signature=tokenized.signature,
            test=d.test,
        )
        write_atomic(out / "test.hyp", ("\n".join(hyp) + "\n").encode())
    return results
