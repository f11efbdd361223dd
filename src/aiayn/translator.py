"""`Translator`: text in, text out, for the Python API, `aiayn translate`, validation BLEU and serving.

Sentences are encoded, grouped into batches of similar length (longest first), searched with beam
search (or greedy search or sampling), decoded and put back in input order. An empty sentence gives
an empty translation without running the model; a sentence longer than the model's position table
is an error naming it, unless `truncate` is set.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import torch

from . import cpu
from .config import DecodeConfig
from .cpu.layout import for_decoding, for_decoding_mapped, reader
from .cpu.memory import trim_heap
from .cpu.pages import HugePages, on_huge_pages
from .decode.beam import Hypothesis, beam_search
from .decode.greedy import greedy_hypotheses
from .decode.sampling import sample
from .decode.step import StepModel
from .model import Transformer
from .weights import load_model, read_column_major, read_safetensors


class SentenceTooLong(ValueError):
    """A sentence has more tokens than the model's position table; index is its place in the input."""

    def __init__(self, index: int, detail: str):
        super().__init__(f"sentence {index + 1}: {detail}")
        self.index, self.detail = index, detail


def check_device(device: str | torch.device, what: str = "device") -> torch.device:
    """device as a torch.device that this machine has; a ValueError naming it otherwise."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"{what} {device!r}: not a device name ({str(err).splitlines()[0]})") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = "this PyTorch build has no CUDA support" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise ValueError(f"{what} {device}: CUDA is not available ({why}); use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{what} {device}: there are only {torch.cuda.device_count()} CUDA devices")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{what} {device}: MPS is not available on this machine")
    return device


def check_batching(**options: Any) -> None:
    """batch_size and max_tokens positive integers (or None), truncate a bool: a TypeError or ValueError naming the one
    that is not (a string "4" or "no" would otherwise fail deep inside, or turn truncation on)."""
    for name in ("batch_size", "max_tokens"):
        value = options.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise TypeError(f"{name} = {value!r}: must be an integer, not {type(value).__name__}")
        if value is not None and value < 1:
            raise ValueError(f"{name} = {value!r}: must be an integer of at least 1")
    if "truncate" in options and options["truncate"] is not None and not isinstance(options["truncate"], bool):
        raise TypeError(f"truncate = {options['truncate']!r}: must be True or False")


def as_sentences(sentences: Any) -> list[str]:
    """sentences as a list of strings; a string (which would be translated a character at a time) or a non-string
    item is a TypeError naming it."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError(
            f"sentences must be a list of strings, not one {type(sentences).__name__}: "
            f"translate([text]) for one sentence"
        )
    try:
        sentences = list(sentences)
    except TypeError:
        raise TypeError(f"sentences must be a list of strings, not {type(sentences).__name__}") from None
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"sentences[{i}] = {sentence!r}: must be a string, not {type(sentence).__name__}")
        try:
            sentence.encode("utf-8")
        except UnicodeEncodeError as err:  # "\ud800": a lone surrogate, no character
            raise ValueError(
                f"sentences[{i}] is not valid Unicode: a lone surrogate at character {err.start}"
            ) from None
    return sentences


class Translation(NamedTuple):
    text: str
    score: float  # length-penalised log-probability, what the search ranked by
    log_prob: float
    tokens: int = 0  # target tokens the search generated, its </s> included


def load_for_decoding(directory: str | Path, device: str | torch.device = "cpu") -> Transformer:
    """An aiayn model directory's model laid out for decoding on device: on a CPU its matrices read column-major and
    aiayn.cpu's modules put in place (`cpu.layout.for_decoding`), computing what the paper's model computes."""
    device = check_device(device)
    read = read_column_major if device.type == "cpu" else read_safetensors
    return for_decoding(load_model(directory, device, read))


class Translator:
    """A model, its tokenizer and how to search; `translate(sentences)` returns their translations."""

    def __init__(
        self,
        model: Transformer,
        tokenizer: Any,
        decode_config: DecodeConfig = DecodeConfig(),
        device: str | torch.device = "cpu",
        batch_size: int = 32,
        max_tokens: int | None = None,
        truncate: bool = False,
    ):
        self.device = check_device(device)
        check_batching(batch_size=batch_size, max_tokens=max_tokens, truncate=truncate)
        if not isinstance(decode_config, DecodeConfig):
            raise TypeError(f"decode_config must be a DecodeConfig, not {type(decode_config).__name__}")
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.config = decode_config
        self.batch_size, self.max_tokens, self.truncate = batch_size, max_tokens, truncate
        self.max_source_len = model.config.max_len
        self.gemm: str | None = None  # set by load: the products' backend
        self.huge_pages: HugePages | None = None  # set by load on a CPU: the weights on huge pages (pages.py)

    @classmethod
    def load(
        cls,
        path: str | Path,
        device: str | torch.device = "cpu",
        int8: bool = False,
        gemm: str | None = None,
        **options: Any,
    ) -> Translator:
        """An aiayn model directory, or a Hugging Face Marian one, or a hub id such as "Helsinki-NLP/opus-mt-en-de"
        (`model_folder.resolve`: a local folder wins); options override its decoding defaults.

        gemm: the float32 matrix-product backend on a CPU, "mkl" or "onednn", either with "+packed" (the
        vocabulary packed for oneDNN and, with "onednn", the decoder's matrices too), or "onednn+gemv" (a batch-1
        step's products on aiayn's own product, gemv.py); None or "auto": the AIAYN_GEMM environment variable, else
        the fastest measured on this model's shapes (backend.py).
        """
        check_batching(**{k: options.get(k) for k in ("batch_size", "max_tokens", "truncate")})
        unknown = sorted(
            set(options) - set(DecodeConfig.__dataclass_fields__) - {"batch_size", "max_tokens", "truncate"}
        )
        if unknown:
            raise TypeError(
                f"Translator.load: unknown option {unknown[0]!r}; the options are DecodeConfig's fields, "
                "batch_size, max_tokens and truncate"
            )
        DecodeConfig(**{k: v for k, v in options.items() if k in DecodeConfig.__dataclass_fields__ and v is not None})
        from .cpu import backend
        from .cpu.memory import MappedReads
        from .model_folder import load_any, model_config, resolve

        check_device(device)
        path = resolve(path)
        if int8:  # weights mapped from the file and quantised a layer at a time: never all float32 at once
            from .cpu.quantize import quantize_int8

            maps = MappedReads()
            model, tokenizer, defaults = load_any(path, device, read=maps.read)
            model = quantize_int8(model, release=maps.release)
            maps.detach(model)
            gemm = "int8"
        elif torch.device(device).type == "cpu":
            rows = min(128, (options.get("batch_size") or 32) * (options.get("beam_size") or 4))
            config = model_config(path)
            gemm = backend.choose(config, rows, gemm)  # before loading: it decides the layout
            maps = MappedReads()
            model, tokenizer, defaults = load_any(path, device, read=reader(gemm, config.target_vocab_size, maps))
        else:  # a GPU: its own libraries
            model, tokenizer, defaults = load_any(path, device)
            gemm = None
        if gemm in backend.BACKENDS:  # the model is this translator's own
            gemm = for_decoding_mapped(model, gemm, rows, maps)
        else:
            for_decoding(model)
        pages = on_huge_pages(model) if torch.device(device).type == "cpu" else None  # last: nothing is copied after
        defaults = defaults or DecodeConfig()
        search = {k: v for k, v in options.items() if k in DecodeConfig.__dataclass_fields__ and v is not None}
        batching = {k: v for k, v in options.items() if k not in search and v is not None}
        translator = cls(model, tokenizer, defaults.replace(**search), device, **batching)
        translator.gemm = (
            gemm  # what the products run on: "mkl", "onednn" (either "+packed"), "int8", or None off the CPU
        )
        translator.huge_pages = pages  # what went onto huge pages (pages.py), None off the CPU
        return translator

    def decode_config(self, **options: Any) -> DecodeConfig:
        """This translator's search settings with the given ones (those not None) replaced."""
        config = self.config.replace(**{k: v for k, v in options.items() if v is not None})
        if config.n_best > config.beam_size and not config.sample:
            raise ValueError(f"n_best {config.n_best} is more than the beam size {config.beam_size}")
        if config.n_best > 1 and config.sample:  # sampling draws one translation a sentence
            raise ValueError(
                f"n_best {config.n_best} with sampling: sampling draws one translation a sentence; "
                "an n-best list needs beam search"
            )
        vocab = self.model.config.target_vocab_size
        if config.beam_size > vocab and not config.sample:  # a beam holds distinct continuations
            raise ValueError(f"beam_size {config.beam_size} is more than the {vocab:,} tokens of the target vocabulary")
        return config

    def translate(self, sentences: list[str], **options: Any) -> list[str]:
        """The best translation of each sentence; options are DecodeConfig fields (beam_size, alpha, ...)."""
        return [hyps[0].text if hyps else "" for hyps in self.translate_n_best(sentences, **options)]

    def translate_n_best(self, sentences: list[str], **options: Any) -> list[list[Translation]]:
        """The n_best translations of each sentence with their scores, best first ([] for an empty one).

        sentences: a list (or any iterable, not a string) of strings."""
        sentences = as_sentences(sentences)
        config = self.decode_config(**options)
        ids = self.encode(sentences)
        out: list[list[Translation]] = [[] for _ in sentences]
        for batch in self.batches(ids):
            src = self._pad([ids[i] for i in batch])
            for i, hyps in zip(batch, self.search(src, config)):
                out[i] = [
                    Translation(self.tokenizer.decode(h.tokens), h.score, h.log_prob, len(h.tokens)) for h in hyps
                ]
        trim_heap()  # the last batch's caches, freed into the C heap, back to the system: a server idles smaller
        return out

    def translate_stream(self, lines: Iterable[str], chunk: int = 4096, **options: Any) -> Iterator[str]:
        """Translations of lines, one for each, in order; chunk lines at a time are sorted into batches."""
        block: list[str] = []
        for line in lines:
            block.append(line)
            if len(block) == chunk:
                yield from self.translate(block, **options)
                block = []
        if block:
            yield from self.translate(block, **options)

    def encode(self, sentences: list[str]) -> list[list[int]]:
        """Source ids (ending in </s>); [] for an empty sentence; too long: an error naming it, or cut."""
        nonempty = [i for i, s in enumerate(sentences) if s.strip()]
        encoded = self.tokenizer.encode_source([sentences[i] for i in nonempty])
        ids: list[list[int]] = [[] for _ in sentences]
        limit = self.max_source_len
        for i, seq in zip(nonempty, encoded):
            if len(seq) > limit:
                if not self.truncate:
                    detail = f"{len(seq)} tokens, more than the model's maximum of {limit} (--truncate, or truncate=True, cuts it)"
                    raise SentenceTooLong(i, detail)
                seq = seq[: limit - 1] + seq[-1:]  # keep the final </s>
            ids[i] = seq
        return ids

    def batches(self, ids: list[list[int]]) -> Iterator[list[int]]:
        """Indices of the non-empty sentences, longest first, in batches of batch_size (or max_tokens)."""
        order = sorted((i for i in range(len(ids)) if ids[i]), key=lambda i: -len(ids[i]))
        batch: list[int] = []
        for i in order:
            too_many = len(batch) == self.batch_size
            if self.max_tokens is not None:  # padded size of the batch with this sentence added
                too_many = bool(batch) and (len(batch) + 1) * len(ids[batch[0]]) > self.max_tokens
            if too_many:
                yield batch
                batch = []
            batch.append(i)
        if batch:
            yield batch

    def search(self, src: torch.Tensor, config: DecodeConfig) -> list[list[Hypothesis]]:
        """Hypotheses for a padded source batch (B, S): sampling, greedy (beam 1) or beam search."""
        step = self.step_model()
        if config.sample:
            return sample(step, src, config)
        if config.beam_size == 1:
            return greedy_hypotheses(step, src, config)
        return beam_search(step, src, config)

    def step_model(self) -> StepModel:
        """The model behind the search's step interface: aiayn.cpu's step (`cpu.step.CpuStep`), which computes what
        the paper's `TransformerStep` computes; off the CPU only its decoder step without training's wrappers
        applies."""
        return cpu.step_model(self.model)

    def _pad(self, seqs: list[list[int]]) -> torch.Tensor:
        S = max(len(s) for s in seqs)
        pad = self.model.config.pad_id
        return torch.tensor([s + [pad] * (S - len(s)) for s in seqs], dtype=torch.long, device=self.device)
