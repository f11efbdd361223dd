"""Model directories: what `Translator.load` reads and training exports.

DIR/config.json        {"format": "aiayn", "version": ..., "model": ModelConfig fields}
DIR/model.safetensors  the weights (no pickled code is ever loaded)
DIR/spm.model          the shared SentencePiece vocabulary, when there is one
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import math
import mmap
import os
import re
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file
from safetensors.torch import save_model as _save_weights
from torch import Tensor, nn

from . import __version__, faults
from .config import ModelConfig
from .files import temporary_beside, with_default_mode
from .model import Transformer

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
    maps: MappedReads | None = None,
    mapped: Callable[[list[int]], bool] | None = None,
) -> dict[str, Tensor]:
    """The tensors of a safetensors file, read into memory once (not memory-mapped).

    column_major=True stores every matrix transposed, `t.t().contiguous().t()`: the same shape and
    values, the layout in which decoding's few-row products run fastest on a CPU (aiayn.decode.layout).
    Such a matrix is read chunk_bytes at a time straight into its place, so loading never holds a
    second copy of the weights, and no file pages are counted as the process's memory afterwards.
    Aliases that safetensors dropped when saving (shared tensors) come back as the same tensor.
    With maps, the tensors whose shape `mapped` picks are left as views of maps' private map of the
    file instead, read later by whoever converts them (the vocabulary packed for decoding).
    """
    path = Path(path)
    views = maps.read(path) if maps is not None and mapped is not None else {}
    with open(path, "rb") as f:
        start, header, metadata = _read_header(f, path)
        tensors = {}
        for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
            if name in views and mapped(info["shape"]):
                tensors[name] = views[name]
                continue
            f.seek(start + info["data_offsets"][0])
            where = f"{path}: {name}"
            tensors[name] = _read_tensor(f, DTYPES[info["dtype"]], info["shape"], column_major, chunk_bytes, where)
    return _with_aliases(tensors, metadata)


read_column_major: Reader = partial(read_safetensors, column_major=True)  # for decoding on a CPU


def _with_aliases(tensors: dict[str, Tensor], metadata: dict) -> dict[str, Tensor]:
    for alias, name in metadata.items():  # safetensors' save_model records each dropped alias this way
        if alias not in tensors and name in tensors:
            tensors[alias] = tensors[name]
    return tensors


def _read_header(f, path: Path) -> tuple[int, dict, dict]:
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


def trim_heap() -> None:
    """Return the C heap's free memory to the system (glibc's malloc_trim; nothing elsewhere).

    glibc keeps freed blocks of up to 32 MiB in the process once a block that size has been freed (its
    mmap threshold rises), so a loader's temporaries would raise the resident memory for good, and each
    decoding batch's buffers would land partly in new pages (`TransformerStep.start` calls this first).
    """
    if _malloc_trim is not None:
        _malloc_trim(0)


@functools.lru_cache(maxsize=1)
def libc() -> ctypes.CDLL | None:
    """The C library this process already has (nothing new is loaded), madvise's argument types set; None where
    there is none to ask (Windows)."""
    try:
        library = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    if hasattr(library, "madvise"):
        library.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        library.madvise.restype = ctypes.c_int
    return library


_malloc_trim = getattr(libc(), "malloc_trim", None)  # glibc's; not in musl, macOS or Windows


class Mapping(NamedTuple):
    """One of this process's memory mappings: [start, end), its permissions ("r-xp"), the file's inode ("0" for
    anonymous memory), its path ("" for none), and with details /proc/self/smaps's figures in kB ("Rss", ...)."""

    start: int
    end: int
    perms: str
    inode: str
    path: str
    kib: dict[str, int]


def mappings(details: bool = False) -> list[Mapping]:
    """This process's memory mappings in address order, from /proc/self/maps, or with details from /proc/self/smaps
    (each mapping's figures in kB). Linux only: OSError elsewhere."""
    found: list[Mapping] = []
    for line in Path("/proc/self/smaps" if details else "/proc/self/maps").read_text(errors="replace").splitlines():
        fields = line.split(maxsplit=5)  # address, perms, offset, device, inode, path (which may hold spaces)
        if not fields:
            continue
        if not fields[0].endswith(":"):  # a mapping's first line; smaps's figures follow as "Name: value kB"
            start, end = (int(a, 16) for a in fields[0].split("-"))
            found.append(Mapping(start, end, fields[1], fields[4], fields[5].strip() if len(fields) == 6 else "", {}))
        elif found and len(fields) > 1 and fields[1].isdigit():
            found[-1].kib[fields[0][:-1]] = int(fields[1])
    return found


class MappedReads:
    """A reader whose tensors are views of memory-mapped files, so that only what is used is in memory.

        maps = MappedReads()
        model = load_model(directory, read=maps.read)   # the weights themselves are not read yet
        ...                                             # use the weights; maps.release() now and then
        maps.detach(model)                              # copy what the model still holds out of the files

    The int8 loader uses this (aiayn.decode.quantize): it quantises a block of the vocabulary or one
    linear layer at a time and calls `release()` after each, so the float32 weights are never all in
    memory at once. The maps are private (copy-on-write): the files never change. `release()` gives
    back the pages read so far; a later read maps the file's contents again (so changes written into
    a mapped tensor are dropped: release only what nothing will read again). `detach` leaves the
    model with no tensor in a mapped file, so that a file later changed on disk cannot reach it.
    """

    def __init__(self) -> None:
        self.maps: list[tuple[mmap.mmap, int, int]] = []  # (map, first address, length)

    def read(self, path: str | Path) -> dict[str, Tensor]:
        """The tensors of a safetensors file as views of its private map (a `Reader`)."""
        path = Path(path)
        with open(path, "rb") as f:
            start, header, metadata = _read_header(f, path)
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        length = len(mapped)
        self.maps.append((mapped, torch.frombuffer(mapped, dtype=torch.uint8, count=1).data_ptr(), length))
        tensors = {}
        for name, info in header.items():
            dtype, shape, (begin, end) = DTYPES[info["dtype"]], info["shape"], info["data_offsets"]
            n = math.prod(shape)
            if end - begin != n * dtype.itemsize or start + end > length:
                raise ValueError(f"{path}: {name}: the file ends before this tensor does (truncated?)")
            view = (
                torch.frombuffer(mapped, dtype=dtype, count=n, offset=start + begin)
                if n
                else torch.empty(0, dtype=dtype)
            )
            tensors[name] = view.view(shape)
        return _with_aliases(tensors, metadata)

    def holds(self, t: Tensor) -> bool:
        """Whether t's memory lies in one of the mapped files."""
        address = t.untyped_storage().data_ptr()
        return any(first <= address < first + length for _, first, length in self.maps)

    def release(self) -> None:
        """Give back the mapped pages read so far (a later read maps them again), and the heap memory
        freed since: the temporaries of quantising a layer would otherwise stay in the process."""
        self._drop_pages()
        trim_heap()

    def _drop_pages(self) -> None:
        """Unmap the pages of the files read so far (a later read maps them again)."""
        for mapped, _, _ in self.maps:
            if hasattr(mapped, "madvise"):  # Linux, macOS; elsewhere the pages stay until the map goes
                mapped.madvise(mmap.MADV_DONTNEED)

    def detach(self, model: nn.Module) -> None:
        """Every parameter and buffer of model still in a mapped file copied into memory of its own.

        The pages read are given back after each copy: a read maps the block of the file's page cache around
        what it reads (64 KiB of small pages, more where the kernel caches the file in large blocks), and sixty
        small tensors (biases, norms) once held 52 MiB that way at the load's peak (docs/translation.md)."""
        for module in model.modules():
            for name, t in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
                if self.holds(t):
                    copy = t.detach().clone()
                    setattr(
                        module, name, nn.Parameter(copy, requires_grad=False) if isinstance(t, nn.Parameter) else copy
                    )
                    self._drop_pages()
        self.maps.clear()  # the maps close once no tensor views them


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
