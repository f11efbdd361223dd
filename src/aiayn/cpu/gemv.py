"""aiayn's own matrix-vector product for the few rows of a decoding step (`gemv.c`), built on first use.
Not in the paper: a speed measure (docs/studies/translation-speed.md, "aiayn's own product at batch 1").

At batch 1 a step multiplies 1 to 4 rows (the hypotheses) by every weight matrix, read once a step, so the step
is bound by how fast its products read memory; where oneDNN's product reads the matrices slower than a plain sum
of them streams, `gemv.c`, which reads each weight once in the layout PyTorch stores it, keeps pace with the sum.

The C source ships with the package. The host's C compiler (`$CC`, else `cc`) builds it with
`-march=native` the first time it is needed, in well under a second. The library goes into a cache
folder of the user's own (`$AIAYN_CACHE`, else `$XDG_CACHE_HOME/aiayn`, else `~/.cache/aiayn`), named
by a hash of the source, the compiler and the CPU, and is called through ctypes. It is linked to the
very OpenMP library PyTorch has loaded (a wheel may ship libgomp under a name of its own: a second
runtime would start threads of its own) and told torch's thread count at each call. Where there is no
compiler, the build fails, the cache folder or one above it could be written by another user, or the
library's product disagrees with PyTorch's on a check, `kernel()` is None and `why_not()` says why.
The backend measure (`backend.measure`) then leaves "onednn+gemv" out, and forcing it is an error that
gives the reason. `build` does the same for decode/'s other C source (`attend.c`, loaded by `attend.py`).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import stat
import subprocess
from pathlib import Path

import torch
from torch import Tensor, nn

from ..files import temporary_beside
from .memory import mappings
from .projection import BufferedProjection

SOURCE = Path(__file__).with_name("gemv.c")
MAX_ROWS = 4  # rows a call multiplies: a step's hypotheses at batch 1, beam 4 (more go to oneDNN)
FLAGS = [
    "-O3",
    "-march=native",
    "-fopenmp-simd",
    "-shared",
    "-fPIC",
]  # then -fopenmp and PyTorch's libgomp, if it has one
SYMBOL = "aiayn_gemv_f32"
ARGMAX = "aiayn_argmax_f32"  # greedy search's pick, in the same file


def cache_folder() -> Path:
    """Where built kernels are kept: $AIAYN_CACHE, else $XDG_CACHE_HOME/aiayn, else ~/.cache/aiayn; then kernels/."""
    root = os.environ.get("AIAYN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "aiayn"
    )
    return Path(root) / "kernels"


def _libgomp() -> str | None:
    """PyTorch's GNU OpenMP library as this process has loaded it (whatever its file is named), or None: then the
    kernel is built without threads of its own rather than with a second runtime beside PyTorch's.

    Other wheels ship a libgomp of their own (SentencePiece's is `sentencepiece.libs/libgomp-<hash>.so`), and a
    process that imports them has several loaded. PyTorch's is the one its own library resolves OpenMP's calls
    to (`_openmp_of`); where that cannot be asked, the one inside PyTorch's folders (`torch/lib`, `torch.libs`),
    else the only one loaded. A PyTorch on another OpenMP (Intel's or LLVM's) gets None."""
    loaded = []
    for path in (m.path for m in mappings()):
        if ".so" in path and path not in loaded and os.path.isfile(path):
            loaded.append(path)
    torch_cpu = next((p for p in loaded if os.path.basename(p).startswith("libtorch_cpu")), None)
    resolved = _openmp_of(torch_cpu) if torch_cpu else None
    if resolved is not None:
        return resolved if os.path.basename(resolved).startswith("libgomp") else None
    gomps = [p for p in loaded if os.path.basename(p).startswith("libgomp")]
    torch_folder = os.path.dirname(os.path.realpath(torch.__file__))
    torchs = [
        p for p in gomps if os.path.realpath(p).startswith((torch_folder + os.sep, torch_folder + ".libs" + os.sep))
    ]
    return torchs[0] if torchs else gomps[0] if len(gomps) == 1 else None


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _openmp_of(library: str) -> str | None:
    """The file that `omp_get_max_threads` resolves to for library (already loaded), looked up in the order the
    dynamic linker binds it: the process's global scope, then library's own dependencies; named by dladdr.
    None where that cannot be asked."""
    try:
        try:  # as the dynamic linker binds library's calls: the global scope first (LD_PRELOAD, RTLD_GLOBAL libraries)
            address = ctypes.cast(ctypes.CDLL(None).omp_get_max_threads, ctypes.c_void_p).value
        except AttributeError:  # then what library itself was linked against
            handle = ctypes.CDLL(library, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            address = ctypes.cast(handle.omp_get_max_threads, ctypes.c_void_p).value
        dladdr = ctypes.CDLL(None).dladdr
        dladdr.argtypes, dladdr.restype = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)], ctypes.c_int
        info = _DlInfo()
        if not address or not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
            return None
        return os.fsdecode(info.dli_fname)
    except (OSError, AttributeError):
        return None


def _key(source: Path, compiler: str, flags: list[str]) -> str:
    """A hash of what a built library depends on: its source, the compiler, its flags, the CPU."""
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, errors="replace", timeout=30
    ).stdout
    try:
        cpu = "".join(
            line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith(("model name", "flags"))
        )  # -march=native builds for this CPU
    except OSError:
        cpu = platform.processor()
    parts = [source.read_bytes(), version.encode(), " ".join(flags).encode(), platform.machine().encode(), cpu.encode()]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:20]


def _private(folder: Path) -> bool:
    """Whether folder is the user's own and no one else can write to it (a library loaded from it runs as us)."""
    info = folder.stat()
    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _trusted_path(folder: Path) -> bool:
    """Whether no other user can replace folder: every folder above it is ours or root's, and not writable by
    others unless sticky (as /tmp is: there no one may rename another's entries)."""
    for above in Path(os.path.realpath(folder)).parents:
        info = above.stat()
        if info.st_uid not in (0, os.getuid()):
            return False
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            return False
    return True


def _build(source: Path, compiler: str, flags: list[str], link: list[str], folder: Path, name: str) -> Path:
    """source's library built into folder/name (written whole: a temporary file, then renamed)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not _private(folder) or not _trusted_path(folder):
        raise OSError(
            f"{folder} is not this user's alone (another user owns it, or could write to it or a folder "
            "above it); not loading code from it: set AIAYN_CACHE to a folder of your own"
        )
    target = folder / name
    if target.is_file() and _private(target):
        return target
    scratch = temporary_beside(target)
    try:
        command = [compiler, *flags, str(source), "-o", str(scratch), *link]
        done = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=120)
        if done.returncode != 0:
            raise OSError(f"{compiler} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
        os.chmod(scratch, 0o700)
        os.replace(scratch, target)
    finally:
        scratch.unlink(missing_ok=True)
    return target


@functools.cache
def build(
    source: Path, libraries: tuple[str, ...] = (), defines: tuple[str, ...] = ()
) -> tuple[ctypes.CDLL | None, str | None]:
    """(source's library, built and loaded as this module's docstring says, None), or (None, why not); libraries
    are linked too ("-lm"), defines passed to the compiler ("-DNAME"). The caller takes its functions, sets their
    argument types and checks them against PyTorch before it uses them."""
    if platform.system() != "Linux":
        return None, "built only on Linux"
    compiler = os.environ.get("CC") or "cc"
    if shutil.which(compiler) is None:
        return None, f"no C compiler ({compiler!r} not found; set CC)"
    try:
        gomp = _libgomp()
        # With PyTorch's libgomp: compiled with -fopenmp, linked to that very file (-nodefaultlibs keeps gcc's own
        # -lgomp out: the system's libgomp beside PyTorch's would be a second runtime), and libc.
        flags = FLAGS + list(defines) + (["-fopenmp", "-nodefaultlibs"] if gomp else [])
        link = [*libraries, *([gomp, "-lc"] if gomp else [])]
        path = _build(
            source, compiler, flags, link, cache_folder(), f"{source.stem}-{_key(source, compiler, flags + link)}.so"
        )
        return ctypes.CDLL(str(path)), None
    except Exception as err:  # optional: whatever goes wrong, decoding goes on without it, and says why
        return None, f"could not build {source.name}: {err}"


@functools.lru_cache(maxsize=1)
def _load() -> tuple[object | None, str | None]:
    """(the C product, None), or (None, why not)."""
    library, why = build(SOURCE)
    if library is None:
        return None, why
    function = getattr(library, SYMBOL)
    function.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long] * 3 + [ctypes.c_int]
    function.restype = None
    generator = torch.Generator().manual_seed(0)
    for M, N, K in ((1, 37, 50), (3, 70, 64), (4, 129, 33)):  # odd shapes: every tail of gemv.c
        x, W, b = (torch.randn(*shape, generator=generator, dtype=torch.float32) for shape in ((M, K), (N, K), (N,)))
        y = torch.empty(M, N, dtype=torch.float32)
        function(x.data_ptr(), W.data_ptr(), b.data_ptr(), y.data_ptr(), M, N, K, torch.get_num_threads())
        if not torch.allclose(y, torch.addmm(b, x, W.t()), atol=1e-4, rtol=1e-4):
            return None, f"{SOURCE.name}'s product disagreed with PyTorch's on a ({M}, {K}) x ({N}, {K}) check"
    return function, None


@functools.lru_cache(maxsize=1)
def _load_argmax():
    """The C pick of greedy search (x, N, V, best, column), checked against torch.max(x, dim=1), or None."""
    library, _ = build(SOURCE)
    if library is None:
        return None
    function = getattr(library, ARGMAX, None)
    if function is None:
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    function.restype = None
    x = torch.randn(6, 1001, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
    x[1, [3, 700]] = 9.0  # equals: the first column
    x[2] = float("-inf")  # every piece banned
    x[3, 500], x[4, [7, 900]], x[4, 10] = float("nan"), float("nan"), 99.0  # a NaN counts the largest
    x[5, 1000] = 9.0  # the last column
    best, column = torch.empty(6, dtype=torch.float32), torch.empty(6, dtype=torch.long)
    function(x.data_ptr(), 6, 1001, best.data_ptr(), column.data_ptr(), torch.get_num_threads())
    values, indices = x.max(dim=1)
    if not (torch.equal(column, indices) and torch.allclose(best, values, equal_nan=True)):
        return None
    return function


def argmax(x: Tensor) -> tuple[Tensor, Tensor] | None:
    """x.max(dim=1) for x (N, V) float32, contiguous, on the CPU: the largest value of each row and its column (the
    first among equals; a NaN counts the largest), (N, 1) each, by the C pick; None where it is not built or x is
    not such a tensor (empty rows, or one that tracks a gradient, which the pick would not carry)."""
    if (
        x.dim() != 2
        or x.size(1) == 0
        or x.dtype != torch.float32
        or x.device.type != "cpu"
        or not x.is_contiguous()
        or x.requires_grad
    ):
        return None
    function = _load_argmax()
    if function is None:
        return None
    N, V = x.shape
    best, column = (
        torch.empty(N, 1, dtype=torch.float32),
        torch.empty(N, 1, dtype=torch.long),
    )  # float32 whatever the default
    function(x.data_ptr(), N, V, best.data_ptr(), column.data_ptr(), torch.get_num_threads())
    return best, column


def kernel():
    """The built product (x, W, b, y, M, N, K), or None: see `why_not`."""
    return _load()[0]


def why_not() -> str | None:
    """Why there is no kernel, or None where there is."""
    return _load()[1]


def product(x: Tensor, weight: Tensor, bias: Tensor | None = None, out: Tensor | None = None) -> Tensor:
    """x (M, K) W^T + b, M <= MAX_ROWS, into out (M, N) if given; W (N, K); float32, contiguous, on the CPU.
    Checked; the modules below check once what does not change (their matrices) and call `_multiply`."""
    if kernel() is None:
        raise RuntimeError(f"aiayn's product is not available here: {why_not()}")
    M, K = x.shape
    N = weight.size(0)
    out = torch.empty(M, N, dtype=torch.float32) if out is None else out
    if (
        not supports(weight, bias)
        or weight.size(1) != K
        or out.shape != (M, N)
        or M > MAX_ROWS
        or any(t.dtype != torch.float32 or t.device.type != "cpu" or not t.is_contiguous() for t in (x, out))
    ):
        raise ValueError(
            f"gemv.product: x {tuple(x.shape)}, W {tuple(weight.shape)}: not float32 (M <= {MAX_ROWS}, K) "
            "times (N, K), contiguous, on the CPU"
        )
    return _multiply(x, weight, bias, out)


def _multiply(x: Tensor, weight: Tensor, bias: Tensor | None, out: Tensor) -> Tensor:
    """The C call, unchecked: x (M, K), weight (N, K), bias (N,) or None, out (M, N), as `product` checks them."""
    _load()[0](
        x.data_ptr(),
        weight.data_ptr(),
        None if bias is None else bias.data_ptr(),
        out.data_ptr(),
        x.size(0),
        weight.size(0),
        x.size(1),
        torch.get_num_threads(),
    )
    return out


def supports(matrix: Tensor, bias: Tensor | None) -> bool:
    """Whether a module's matrix (N, K) and bias (N,) can go to the kernel: checked once, when it is made."""
    return (
        kernel() is not None
        and matrix.dim() == 2
        and matrix.dtype == torch.float32
        and matrix.is_contiguous()
        and matrix.device.type == "cpu"
        and (
            bias is None
            or (
                bias.shape == matrix.shape[:1]
                and bias.dtype == torch.float32
                and bias.is_contiguous()
                and bias.device.type == "cpu"
            )
        )
    )


def few_rows(x: Tensor, K: int, matrix: Tensor) -> int:
    """The rows of x (..., K) where x times matrix goes to the kernel (1 to MAX_ROWS, float32 on the CPU, no
    gradient to track: the kernel has no backward), else 0 (also where x is not (..., K): oneDNN then says so)."""
    rows = x.numel() // K
    if not 0 < rows <= MAX_ROWS or x.size(-1) != K or x.dtype is not torch.float32 or not x.is_cpu:
        return 0
    if torch.is_grad_enabled() and (x.requires_grad or matrix.requires_grad):
        return 0
    return rows


class GemvLinear(nn.Module):
    """nn.Linear with the kernel's product at up to MAX_ROWS rows and oneDNN's above (inference only).

    The layer's own weight and bias, as stored (row-major): no copy. A step calls it about 50 times: what does
    not change is checked once, here, rather than at every call.
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.direct = supports(self.weight, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        params = self._parameters  # read as a dict: nn.Module's attribute lookup is slow for ~50 calls a step
        weight, bias, K = params["weight"], params.get("bias"), self.in_features  # no bias: not a parameter
        rows = few_rows(x, K, weight) if self.direct else 0
        if not rows:
            from .backend import onednn_linear

            return onednn_linear(x, weight, bias)
        flat = x if x.dim() == 2 else x.reshape(rows, K)  # (M, K): a step's rows (`layer_step`) as they are
        out = _multiply(flat.contiguous(), weight, bias, torch.empty(rows, self.out_features, dtype=torch.float32))
        return out if x.dim() == 2 else out.view(*x.shape[:-1], self.out_features)


class GemvProjection(BufferedProjection):
    """OutputProjection (§3.4) with the kernel's product at up to MAX_ROWS rows, the logits (and the bias)
    written into the reused buffer of `projection.BufferedProjection`; oneDNN's product, a new tensor, above."""

    def forward(self, hidden: Tensor, bias: Tensor | None = None) -> Tensor:
        weight = self.projection.matrix  # (V, D)
        rows = few_rows(hidden, weight.size(1), weight) if hidden.dim() == 2 and supports(weight, bias) else 0
        if not rows:
            from .backend import onednn_linear

            return onednn_linear(hidden, weight, bias)
        out = self.logits.rows(rows, weight.size(0), hidden.device)
        return _multiply(hidden.contiguous(), weight, bias, out)
