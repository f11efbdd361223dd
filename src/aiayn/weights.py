"""Model directories: what `Translator.load` reads and training exports.

DIR/config.json        {"format": "aiayn", "version": ..., "model": ModelConfig fields}
DIR/model.safetensors  the weights (no pickled code is ever loaded)
DIR/spm.model          the shared SentencePiece vocabulary, when there is one
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file
from safetensors.torch import save_model as _save_weights
from torch import Tensor

from . import faults
from .config import ModelConfig
from .files import temporary_beside, with_default_mode
from .model import Transformer
from .version import __version__

CONFIG, WEIGHTS, VOCAB = "config.json", "model.safetensors", "spm.model"
DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
Reader = Callable[[Path], dict[str, Tensor]]  # a safetensors file -> its tensors; loaders take one explicitly


def read_safetensors(
    path: str | Path,
    column_major: bool = False,
    chunk_bytes: int = 8 << 20,
    maps: Any = None,
    mapped: Callable[[list[int]], bool] | None = None,
) -> dict[str, Tensor]:
    """The tensors of a safetensors file, read into memory once (not memory-mapped).

    column_major=True stores every matrix transposed, `t.t().contiguous().t()`: the same shape and
    values, the layout in which decoding's few-row products run fastest on a CPU (aiayn.cpu.layout).
    Such a matrix is read chunk_bytes at a time straight into its place, so loading never holds a
    second copy of the weights, and no file pages are counted as the process's memory afterwards.
    Aliases that safetensors dropped when saving (shared tensors) come back as the same tensor.
    With maps (`aiayn.cpu.memory.MappedReads`), the tensors whose shape `mapped` picks are left as views of maps' private map of the
    file instead, read later by whoever converts them (the vocabulary packed for decoding).
    """
    path = Path(path)
    views = maps.read(path) if maps is not None and mapped is not None else {}
    with open(path, "rb") as f:
        start, header, metadata = read_header(f, path)
        tensors = {}
        for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
            if name in views and mapped(info["shape"]):
                tensors[name] = views[name]
                continue
            f.seek(start + info["data_offsets"][0])
            where = f"{path}: {name}"
            tensors[name] = _read_tensor(f, DTYPES[info["dtype"]], info["shape"], column_major, chunk_bytes, where)
    return with_aliases(tensors, metadata)


read_column_major: Reader = partial(read_safetensors, column_major=True)  # for decoding on a CPU


def with_aliases(tensors: dict[str, Tensor], metadata: dict) -> dict[str, Tensor]:
    for alias, name in metadata.items():  # safetensors' save_model records each dropped alias this way
        if alias not in tensors and name in tensors:
            tensors[alias] = tensors[name]
    return tensors


def read_header(f, path: Path) -> tuple[int, dict, dict]:
    """A safetensors header, checked against the file: (where the data starts, name -> dtype/shape/offsets, metadata).

    The first 8 bytes give the header's length; a length beyond the file's end (random bytes, a Git LFS
    pointer, a torch pickle) is refused before anything is read, and every tensor must lie inside the file.
    """
    file_size = os.fstat(f.fileno()).st_size
    head = f.read(8)
    size = int.from_bytes(head, "little")
    if len(head) < 8 or size > file_size - 8:
        if head == b"version ":
            raise ValueError(f"{path}: a Git LFS pointer, not the weights (fetch them with `git lfs pull`)")
        if head.startswith((b"PK\x03\x04", b"\x80")):
            raise ValueError(f"{path}: a PyTorch pickle, not a safetensors file (aiayn loads no pickles)")
        raise ValueError(
            f"{path}: not a safetensors file (its first 8 bytes {head!r} are no header length "
            f"within its {file_size:,} bytes)"
        )
    try:
        header = json.loads(f.read(size))
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise ValueError(f"{path}: not a safetensors file (the header is not JSON: {err})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: not a safetensors file (the header is not a JSON object)")
    metadata = header.pop("__metadata__", None) or {}
    if not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise ValueError(f"{path}: not a safetensors file (__metadata__ is not a mapping of strings)")
    data_size = file_size - 8 - size
    for name, info in header.items():
        if not (isinstance(info, dict) and {"dtype", "shape", "data_offsets"} <= info.keys()):
            raise ValueError(f"{path}: not a safetensors file (entry {name!r} lacks dtype, shape or data_offsets)")
        if not isinstance(info["dtype"], str) or info["dtype"] not in DTYPES:
            raise ValueError(f"{path}: tensor {name} has dtype {info['dtype']}, which aiayn does not read")
        shape, offsets = info["shape"], info["data_offsets"]
        if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
            raise ValueError(f"{path}: tensor {name} has shape {shape!r}, not a list of sizes")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(n) is int for n in offsets)
            and 0 <= offsets[0] <= offsets[1]
        ):
            raise ValueError(f"{path}: tensor {name} has data_offsets {offsets!r}, not a [begin, end] range")
        if offsets[1] > data_size:
            raise ValueError(f"{path}: {name}: the file ends before this tensor does (truncated?)")
        if offsets[1] - offsets[0] != math.prod(shape) * DTYPES[info["dtype"]].itemsize:
            raise ValueError(
                f"{path}: tensor {name}: data_offsets {offsets} do not hold a {info['dtype']} tensor of shape {shape}"
            )
    return 8 + size, header, metadata


SAFE_TORCH_LOAD = (2, 6)  # torch.load(weights_only=True) could be made to run code before 2.6 (CVE-2025-32434)


def load_plain_pickle(path: Path, what: str) -> Any:
    """A PyTorch pickle (pytorch_model.bin, an old state.pt) read with weights_only=True: plain tensors and
    containers only, no code run. Refused outright on a torch too old for that check to hold; anything the
    check refuses is one line, `PATH: refused: ...; nothing in it was run`."""
    version = tuple(int(part) for part in re.findall(r"\d+", torch.__version__)[:2])
    if version < SAFE_TORCH_LOAD:
        raise ValueError(
            f"{path}: not read: torch {torch.__version__} cannot load a pickle without risk of running "
            f"code in it (CVE-2025-32434); install torch 2.6 or later, or give {what} as safetensors"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError and whatever a hostile or broken file raises
        raise ValueError(
            f"{path}: refused: not {what} of plain tensors ({_why_refused(err)}); nothing in it was run"
        ) from None


def _why_refused(err: Exception) -> str:
    """The reason in torch.load's refusal (`Unsupported global: GLOBAL posix.system`), without its advice to load
    the file with weights_only=False."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    for i, line in enumerate(lines[:-1]):
        if line.endswith("WeightsUnpickler error:"):
            return lines[i + 1][:120]
    return lines[0][:120] if lines and "weights_only" not in lines[0] else type(err).__name__


def _read_tensor(f, dtype: torch.dtype, shape: list[int], column_major: bool, chunk_bytes: int, where: str) -> Tensor:
    """The tensor at f's position: read as stored, or (a matrix, column_major) rows at a time into its transpose."""

    def read(n: int) -> Tensor:  # the next n elements
        buffer = bytearray(n * dtype.itemsize)
        if n and f.readinto(buffer) != len(buffer):
            raise ValueError(f"{where}: the file ends before this tensor does (truncated?)")
        return torch.frombuffer(buffer, dtype=dtype) if n else torch.empty(0, dtype=dtype)

    if not (column_major and len(shape) == 2):
        return read(math.prod(shape)).view(shape)
    rows, cols = shape
    out = torch.empty(cols, rows, dtype=dtype).t()  # (rows, cols), column-major
    step = max(1, chunk_bytes // max(1, cols * dtype.itemsize))
    for start in range(0, rows, step):
        n = min(step, rows - start)
        out[start : start + n] = read(n * cols).view(n, cols)
    return out


def write_atomic(path: Path, data: bytes, fault: str | None = None) -> None:
    """Write to a temporary file beside path, then rename: a crash never leaves half a file.

    A failed write (a full disk) removes the temporary file. fault names the points `{fault}.partial`
    and `{fault}.before-rename` of aiayn.faults.
    """
    tmp = temporary_beside(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if fault:
                faults.point(f"{fault}.partial", partial=tmp)
            os.fsync(f.fileno())
        if fault:
            faults.point(f"{fault}.before-rename")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_tensors(tensors: dict[str, Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """safetensors' save_file, the file then given open()'s permissions: save_file makes it anew with mode 0600."""
    with write_errors(path):
        save_file(tensors, str(path), metadata=metadata)
    with_default_mode(path)


@contextlib.contextmanager
def write_errors(path: str | Path):
    """safetensors' writers report a failed write (a full disk) as a SafetensorError holding the system's error
    ("I/O error: No space left on device (os error 28)"): raised here as the OSError it is, which the commands
    report in one line."""
    try:
        yield
    except SafetensorError as err:
        code = re.search(r"\(os error (\d+)\)|Os \{ code: (\d+)", str(err))
        if code is None:
            raise
        number = int(code.group(1) or code.group(2))
        raise OSError(number, os.strerror(number), str(path)) from None


def save_model(model: Transformer, directory: str | Path, vocab_proto: bytes | None = None, **extra) -> Path:
    """Write config.json, model.safetensors and (given) spm.model into directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model = getattr(model, "module", model)  # unwrap DistributedDataParallel
    model = getattr(model, "_orig_mod", model)  # and torch.compile
    tmp = temporary_beside(directory / WEIGHTS)
    try:
        with write_errors(tmp):
            _save_weights(model, str(tmp))
        with_default_mode(tmp)
        os.replace(tmp, directory / WEIGHTS)
    finally:
        tmp.unlink(missing_ok=True)
    meta = {"format": "aiayn", "version": __version__, "model": model.config.to_dict(), **extra}
    write_atomic(directory / CONFIG, json.dumps(meta, indent=2).encode())
    if vocab_proto is not None:
        write_atomic(directory / VOCAB, vocab_proto)
    return directory


def read_config(directory: str | Path) -> dict:
    """DIR/config.json as a JSON object; an error naming the file when it is missing or is not one."""
    path = Path(directory) / CONFIG
    if not Path(directory).exists():
        raise FileNotFoundError(f"{directory}: no such model directory")
    if not path.is_file():
        raise FileNotFoundError(f"{directory}: no {CONFIG}; not a model directory")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not valid UTF-8 (byte {err.start})") from None
    except (json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: expected a JSON object, not {json.dumps(meta)[:40]}")
    return meta


def is_aiayn_model(directory: str | Path) -> bool:
    try:
        return read_config(directory).get("format") == "aiayn"
    except (FileNotFoundError, ValueError):
        return False


def read_model_config(directory: str | Path) -> ModelConfig:
    """The ModelConfig of an aiayn model directory's config.json, checked field by field."""
    path = Path(directory) / CONFIG
    meta = read_config(directory)
    if meta.get("format") != "aiayn":
        raise ValueError(f"{path}: not an aiayn model (format {meta.get('format')!r})")
    if "model" not in meta:
        raise ValueError(f'{path}: no "model" entry (the ModelConfig fields)')
    if not isinstance(meta["model"], dict):
        what = json.dumps(meta["model"])[:40]
        raise ValueError(f'{path}: "model" must be a JSON object of ModelConfig fields, not {what}')
    try:
        return ModelConfig.from_dict(meta["model"])
    except ValueError as err:
        raise ValueError(f"{path}: model: {err}") from None


def load_model(
    directory: str | Path, device: str | torch.device = "cpu", read: Reader = read_safetensors
) -> Transformer:
    """The Transformer saved in directory, in eval mode, its weights read by `read` (`read_safetensors`,
    `read_column_major` for decoding on a CPU, or `MappedReads().read`)."""
    directory = Path(directory)
    config = read_model_config(directory)
    weights = directory / WEIGHTS
    if not weights.is_file():
        raise FileNotFoundError(f"{directory}: no {WEIGHTS}")
    state = read(weights)
    with torch.device("meta"):  # names and shapes only
        skeleton = Transformer(config)
    _fill_tied(skeleton, state)
    check_state(state, skeleton.state_dict(), str(weights))
    return Transformer.from_state_dict(config, state).to(device).eval()


def _fill_tied(model: Transformer, state: dict[str, Tensor]) -> None:
    """A tied tensor is saved under one of its names (safetensors, checkpoint averaging): give it all of them."""
    names_of: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(param), []).append(name)
    for names in names_of.values():
        present = [n for n in names if n in state]
        for name in names:
            if present and name not in state:
                state[name] = state[present[0]]


def check_state(state: dict[str, Tensor | None], expected: dict[str, Tensor], where: str) -> None:
    """Every tensor aiayn needs is there with its shape; vocabulary mismatches are named as such."""
    missing = sorted(k for k in expected if state.get(k) is None)
    if missing:
        raise ValueError(f"{where}: missing tensors {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    extra = sorted(set(state) - set(expected))
    if extra:
        raise ValueError(f"{where}: unexpected tensors {', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            what = (
                "vocabulary size" if name.endswith(("embed.weight", "logits_bias", "output_proj.weight")) else "shape"
            )
            raise ValueError(
                f"{where}: {name} has shape {tuple(tensor.shape)} but config.json gives "
                f"{tuple(expected[name].shape)} ({what} does not match the weights)"
            )
