"""The kinds of model folder aiayn reads, each detected once and handed to its reader.

    aiayn    config.json {"format": "aiayn"}, model.safetensors, and its tokenizer: spm.model, or (converted
             from Marian) source.spm, target.spm, vocab.json, tokenizer_config.json
    parser   an aiayn folder whose tokenizer is a parser's (parse-target.json beside the weights, §6.3)
    marian   Hugging Face Marian: config.json {"model_type": "marian"}, weights, the same four tokenizer files

`resolve` turns a name into a folder: a local path as it is, else a Hugging Face hub id through huggingface_hub's
cache. `load_any` returns the model, its tokenizer and its decoding defaults; `model_config` reads config.json alone
(a reader that lays the weights out for decoding is chosen from it before the weights are read); the tokenizer's
files are written and read back here too.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from . import weights
from .config import DecodeConfig, ModelConfig
from .data.vocab import Vocab
from .marian.export import marian_tokenizer_files
from .marian.load import (
    GENERATION_CONFIG,
    SAFETENSORS,
    SAFETENSORS_INDEX,
    TORCH_BIN,
    is_marian_model,
    load_marian,
    model_config_from_marian,
    read_marian_config,
)
from .marian.tokenizer import SOURCE_SPM, TARGET_SPM, TARGET_VOCAB, TOKENIZER_CONFIG, VOCAB, MarianTokenizer
from .model import Transformer
from .parse.tokenizer import SOURCE_FILE, TARGET_FILE, WORDS_FILE, ParseTokenizer

# The files aiayn reads from a model folder of any kind, the only ones fetched from the hub (never a repository's
# TensorFlow, Flax or Rust weights). pytorch_model.bin is fetched only where there are no safetensors weights.
HUB_FILES = [
    weights.CONFIG,
    GENERATION_CONFIG,
    weights.VOCAB,
    SOURCE_SPM,
    TARGET_SPM,
    VOCAB,
    TARGET_VOCAB,
    TOKENIZER_CONFIG,
    SOURCE_FILE,
    WORDS_FILE,
    TARGET_FILE,
    SAFETENSORS,
    SAFETENSORS_INDEX,
    "model-*-of-*.safetensors",  # the shards an index names
]
# huggingface_hub's repo-id rules for `owner/name`: letters, digits, - _ . (not first or last), at most 96 each; then an
# optional @revision (a branch, tag or commit). A bare `name` is not taken: it is more likely a folder not made yet.
HUB_ID = re.compile(r"(\b[\w\-.]{1,96}\b/\b[\w\-.]{1,96}\b)(?:@(\S+))?", re.ASCII)


def hub_id(name: str) -> tuple[str, str | None] | None:
    """(repo id, revision or None) when name has the form of a Hugging Face hub id (`owner/name`) and owner is no
    folder here (`runs/base` with runs/ here is a run folder not made yet), else None."""
    match = HUB_ID.fullmatch(name)
    if match is None or "--" in match[1] or ".." in match[1] or match[1].endswith(".git"):
        return None
    if Path(match[1].split("/")[0]).exists():
        return None
    return match[1], match[2]


def resolve(name: str | Path) -> Path:
    """The model folder name stands for: a path that exists here as it is (a local folder always wins), else a
    Hugging Face hub id (`owner/name[@revision]`) fetched into, or read from, huggingface_hub's cache: only
    HUB_FILES, and HF_HUB_OFFLINE=1 reads the cache alone. Any failure is one line naming name."""
    if Path(name).exists():
        return Path(name)
    found = hub_id(str(name)) if isinstance(name, str) else None
    if found is None:
        raise FileNotFoundError(f"{name}: no such model directory")
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.utils import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo, revision = found
    fetch = f"`hf download {repo}{f' --revision {revision}' if revision else ''}`"
    try:
        # config.json first: a repository that is no model aiayn reads is refused before its weights are fetched
        folder = Path(snapshot_download(repo, revision=revision, allow_patterns=[weights.CONFIG]))
        if not (is_marian_model(folder) or weights.is_aiayn_model(folder)):
            raise ValueError(f"{name}: the Hugging Face model {repo} is neither a Marian (opus-mt) nor an aiayn model")
        folder = Path(snapshot_download(repo, revision=folder.name, allow_patterns=HUB_FILES))
        if is_marian_model(folder) and not any((folder / f).is_file() for f in (SAFETENSORS, SAFETENSORS_INDEX)):
            # an older opus-mt repository: its weights-only pickle, from the same commit
            folder = Path(snapshot_download(repo, revision=folder.name, allow_patterns=[TORCH_BIN]))
    except GatedRepoError:
        raise ValueError(
            f"{name}: a gated model on the Hugging Face hub: accept its terms at https://huggingface.co/{repo} "
            "and log in with `hf auth login`"
        ) from None
    except RepositoryNotFoundError:
        raise FileNotFoundError(
            f"{name}: no such folder here, and no model {repo} on the Hugging Face hub "
            "(a private one needs `hf auth login`)"
        ) from None
    except RevisionNotFoundError:
        raise FileNotFoundError(f"{name}: the Hugging Face model {repo} has no revision {revision}") from None
    except LocalEntryNotFoundError as err:  # offline or unreachable, and not (wholly) in the cache
        if constants.HF_HUB_OFFLINE:
            why, fix = "while HF_HUB_OFFLINE is set", "run once with HF_HUB_OFFLINE unset"
        else:
            why, fix = f"and the hub could not be reached ({type(err.__cause__ or err).__name__})", "run again online"
        raise FileNotFoundError(
            f"{name}: no such folder here, and no complete copy in the Hugging Face cache ({constants.HF_HUB_CACHE}) "
            f"{why}; {fix}, or fetch it with {fetch}"
        ) from None
    except HfHubHTTPError as err:  # 401 and the like
        status = getattr(getattr(err, "response", None), "status_code", None)
        raise ValueError(f"{name}: the Hugging Face hub refused it (HTTP {status}); fetch it with {fetch}") from None
    except OSError as err:  # the network (a proxy, a reset), not the disk: a full disk keeps its own error
        if err.errno is not None:
            raise
        raise ValueError(f"{name}: the Hugging Face hub could not be reached ({type(err).__name__})") from None
    except Exception as err:  # the HTTP client's own errors (httpx's, which are no OSError) past the hub's retries
        if type(err).__module__.split(".")[0] not in ("httpx", "httpx2", "httpcore", "requests", "urllib3"):
            raise
        raise ValueError(f"{name}: the Hugging Face hub could not be reached ({type(err).__name__})") from None
    return folder


def is_parser(directory: str | Path) -> bool:
    """Whether directory holds a parsing model's tokenizer (its outputs are tree symbols, not text)."""
    return ParseTokenizer.is_saved_in(directory)


def detect_format(directory: str | Path) -> str:
    """ "aiayn" or "marian", from config.json; an error naming the directory otherwise."""
    directory = Path(directory)
    if weights.is_aiayn_model(directory):
        return "aiayn"
    if is_marian_model(directory):
        return "marian"
    weights.read_config(directory)  # a missing config.json gets its own message
    raise ValueError(f"{directory / weights.CONFIG}: neither an aiayn model nor a Hugging Face Marian model")


def load_tokenizer(directory: str | Path) -> Vocab | MarianTokenizer | ParseTokenizer:
    """The tokenizer stored beside a model: spm.model (aiayn's own), else Marian's vocab.json and spm files."""
    directory = Path(directory)
    if ParseTokenizer.is_saved_in(directory):  # a parser: subword source, tree-symbol target
        return ParseTokenizer.load(directory)
    if (directory / weights.VOCAB).is_file():
        return Vocab.load(directory / weights.VOCAB)
    if (directory / VOCAB).is_file() or (directory / SOURCE_SPM).is_file():
        return MarianTokenizer.load(directory)
    raise FileNotFoundError(f"{directory}: no tokenizer ({weights.VOCAB}, or {SOURCE_SPM}/{TARGET_SPM}/{VOCAB})")


def tokenizer_files(tokenizer: Vocab | MarianTokenizer | ParseTokenizer) -> dict[str, bytes]:
    """The files `save_tokenizer` writes for tokenizer: name -> contents."""
    if isinstance(tokenizer, ParseTokenizer):
        return tokenizer.files()
    return {weights.VOCAB: tokenizer.proto} if isinstance(tokenizer, Vocab) else marian_tokenizer_files(tokenizer)


# Every kind's tokenizer files, a parser's first: `load_tokenizer` reads a parser's before spm.model, and spm.model
# before Marian's.
TOKENIZER_FILES = (TARGET_FILE, WORDS_FILE, SOURCE_FILE, weights.VOCAB, VOCAB, TARGET_VOCAB, SOURCE_SPM, TARGET_SPM)


def save_tokenizer(tokenizer: Vocab | MarianTokenizer | ParseTokenizer, directory: str | Path) -> None:
    """Write a tokenizer beside a model so that `load_tokenizer` reads it back: spm.model, Marian's files, or a
    parser's. Another tokenizer's files there are removed first, since `load_tokenizer` could read them in place of
    these (the commands that write into a folder the user named replace them only with --force)."""
    directory = Path(directory)
    files = tokenizer_files(tokenizer)
    for name in TOKENIZER_FILES:
        if name not in files:
            (directory / name).unlink(missing_ok=True)
    for name, data in files.items():
        weights.write_atomic(directory / name, data)


def model_config(directory: str | Path) -> ModelConfig:
    """The ModelConfig of an aiayn or Marian directory, from its config.json alone (no weights read)."""
    if detect_format(directory) == "marian":
        return model_config_from_marian(read_marian_config(directory), unk_id=1)  # sizes only: any id will do
    return weights.read_model_config(directory)


def load_any(
    directory: str | Path, device: str | torch.device = "cpu", read: weights.Reader = weights.read_safetensors
) -> tuple[Transformer, Vocab | MarianTokenizer, DecodeConfig | None]:
    """An aiayn or Marian directory as (model, tokenizer, decode config or None for aiayn's defaults);
    `read` reads the weights (aiayn.weights.read_column_major for decoding on a CPU, MappedReads().read)."""
    if detect_format(directory) == "marian":
        return load_marian(directory, device, read)
    meta = weights.read_config(directory)
    try:
        decode = DecodeConfig.from_dict(meta["decode"]) if "decode" in meta else None
    except ValueError as err:
        raise ValueError(f"{Path(directory) / weights.CONFIG}: decode: {err}") from None
    return weights.load_model(directory, device, read), load_tokenizer(directory), decode
