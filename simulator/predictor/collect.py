"""Measure kernels on the local GPU with torch + CUDA events (``simulator collect``).

Needs only torch and numpy: this module and its imports load without pydantic, simpy, networkx or
even pyyaml (the package's ``__init__`` files load lazily), because GPU machines often have just a
framework. Each kernel is built as a torch call (``builder``), run ``warmup`` times, then timed
``repeats`` times with a CUDA event pair around each call (fewer of both for calls over
``LONG_CALL_S``); the *median* is kept (``latency_s``). That includes the host's dispatch of the call:
on the H200, up to 50x a small kernel's device time. Then a few more calls run under the torch
profiler, which names the CUDA kernels (so tile choices can be checked against cuBLAS's) and sums
their device time (``profiled_s``, per call, without dispatch gaps; what training reads).
Output folder (read back by ``dataset.load_collected``):

* ``kernels.csv``: ``op, dtype, shape (b x m x n x k ...), layout, latency_s, kernel_name, profiled_s``,
  written row by row, so an interrupted run keeps what it measured
* ``gpu.yaml``: the GPU's catalog entry (found by ``torch.cuda.get_device_name``), or what torch
  reports about an unknown GPU, which the user must complete with datasheet peaks.

``--quick`` instead writes ``calibration.yaml``: achieved GEMM FLOP/s per dtype at three large
shapes and copy bandwidth, for ``predict-kernels --calibration`` (a few seconds of GPU time).
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from ..errors import ConfigError, PredictorError
from .kernels import Kernel

if TYPE_CHECKING:
    from ..specs import GpuSpec

TORCH_DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "float8_e4m3fn"}
CALIBRATION_GEMMS = ((1, 8192, 8192, 8192), (1, 4096, 4096, 4096), (1, 8192, 8192, 2048))
CALIBRATION_COPY = (16384, 16384)  # fp32: 1 GiB read + 1 GiB written
COLUMNS = ("op", "dtype", "shape", "layout", "latency_s", "kernel_name", "profiled_s")
PROFILED_CALLS = 3
#: A call longer than this gets no further warm-up, about TIMED_BUDGET_S of timed calls (at least 3) and 1
#: profiled call: long kernels vary little between calls, and NeuSight's LM-head GEMMs take 0.4 s in fp32.
LONG_CALL_S = 0.002
TIMED_BUDGET_S = 0.04


def register(subparsers: argparse._SubParsersAction) -> None:
    """The ``collect`` subcommand (kept here, apart from the other predictor commands, so that it
    registers on a machine without pydantic)."""
    p = subparsers.add_parser("collect", help="measure kernels on the local CUDA GPU (needs torch)")
    p.add_argument("--out", required=True, help="folder to write kernels.csv and gpu.yaml (or calibration.yaml)")
    p.add_argument("--input", help="measure the rows of this CSV (NeuSight format, as predict-kernels reads) "
                   "instead of the default suite")
    p.add_argument("--ops", nargs="*", help="only these kernel ops (default: the whole suite)")
    p.add_argument("--dtype", nargs="*", dest="dtypes", help="dtypes (default bf16 fp32; --quick: all)")
    p.add_argument("--quick", action="store_true", help="only calibrate sustained GEMM FLOP/s and copy bandwidth")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--no-profile", dest="profile", action="store_false",
                   help="skip the profiled calls (kernel names and profiled_s stay empty)")
    p.set_defaults(handler=_command)


def _command(args: argparse.Namespace) -> int:
    kernels = None
    if args.input:
        from .kernel_csv import read_kernel_rows

        kernels = list(dict.fromkeys(read_kernel_rows(args.input)[2]))
    elif args.ops and not args.quick:
        known = {k.op for k in default_suite(None, args.dtypes or ("bf16", "fp32"))}
        unknown = sorted(set(args.ops) - known)
        if unknown:
            raise PredictorError(f"--ops {' '.join(unknown)}: not in the collection suite (its ops: "
                                 f"{', '.join(sorted(known))}); measure other kernels with --input FILE.csv")
    return run_collect(Path(args.out), ops=args.ops, dtypes=args.dtypes, quick=args.quick, warmup=args.warmup,
                       repeats=args.repeats, profile=args.profile, kernels=kernels)


# --- Pure parts (tested without a GPU) ---------------------------------------------------------------

def default_suite(ops: Optional[Iterable[str]] = None, dtypes: Iterable[str] = ("bf16", "fp32")) -> list[Kernel]:
    """Transformer-shaped kernels: linear layers fwd/bwd, attention BMMs, flash attention, norms,
    softmax, elementwise and Adam, for hidden 1024..8192 and 512..16384 tokens. ``tf32`` is a matmul
    mode, so it adds GEMMs only (its vector kernels would be the fp32 ones again); ``fp8`` adds the
    forward linear GEMMs only (``torch._scaled_mm`` takes one un-batched ``nt`` product)."""
    out: list[Kernel] = []
    for dtype in dtypes:
        matmul_only = dtype in ("tf32", "fp8")
        for h in (1024, 2048, 4096, 8192):
            for tokens in (512, 2048, 8192, 16384):
                for n_in, n_out in ((h, 3 * h), (h, h), (h, 4 * h), (4 * h, h)):
                    out.append(Kernel("gemm", dtype, (1, tokens, n_out, n_in), "nt"))
                    if dtype != "fp8":
                        out += [Kernel("gemm", dtype, (1, tokens, n_in, n_out), "nn"),
                                Kernel("gemm", dtype, (1, n_out, n_in, tokens), "tn")]
                if matmul_only:
                    continue
                for op in ("layernorm", "layernorm_bwd", "rmsnorm", "add", "mul", "gelu", "gelu_bwd", "dropout",
                           "softmax", "softmax_bwd", "silu", "copy"):
                    out.append(Kernel(op, dtype, (tokens, h if op != "gelu" else 4 * h)))
        for seq in (1024, 2048, 4096, 8192) if dtype != "fp8" else ():
            for heads, d in ((16, 64), (32, 128)):
                b = max(1, 16384 // seq)
                out += [Kernel("gemm", dtype, (b * heads, seq, seq, d), "nt"),
                        Kernel("gemm", dtype, (b * heads, seq, d, seq), "nn")]
                if dtype not in ("fp32", "tf32"):
                    out += [Kernel(op, dtype, (b, heads, seq, seq, d, 1)) for op in ("flash_attn", "flash_attn_bwd")]
        if not matmul_only:
            out += [Kernel("adam", dtype, (p,)) for p in (10**6, 10**7, 10**8, 5 * 10**8)]
    if ops:
        wanted = set(ops)
        out = [k for k in out if k.op in wanted]
    return list(dict.fromkeys(out))


def csv_row(k: Kernel, seconds: float, name: str = "", profiled_s: Optional[float] = None) -> list[str]:
    return [k.op, k.dtype, "x".join(str(d) for d in k.shape), k.layout, f"{seconds:.6e}", name,
            "" if profiled_s is None else f"{profiled_s:.6e}"]


def write_kernels_csv(path: Path, rows: Iterable[tuple]) -> None:
    """``rows``: (kernel, seconds, kernel name[, profiled seconds]) tuples."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for row in rows:
            w.writerow(csv_row(*row))


def write_mapping(path: Path, mapping: dict) -> None:
    """YAML where pyyaml is installed, else JSON (a subset of YAML, so the readers are the same)."""
    try:
        import yaml
    except ImportError:
        path.write_text(json.dumps(mapping, indent=1) + "\n")
        return
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))


def read_gpu_yaml(path: Path) -> GpuSpec:
    import yaml

    from ..hardware.catalog import gpu_from_mapping

    if not path.is_file():
        raise ConfigError(str(path), "", None, "missing GPU description")
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict):
        raise ConfigError(str(path), "", raw, "expected a mapping of GPU fields")
    return gpu_from_mapping(raw, str(path))


def read_calibration(path: Path) -> dict:
    """A calibration file written by ``collect --quick``; ConfigError when unreadable."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), "calibration", str(path), "file not found")
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict) or not ("gemm" in raw or "copy" in raw):
        raise ConfigError(str(path), "", None, "expected 'gemm' and/or 'copy' sections")
    try:
        calibration_kernels(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(str(path), "", None, f"malformed calibration ({exc})") from None
    return raw


def _entries(value) -> list[dict]:
    return list(value) if isinstance(value, list) else [value]


def calibration_kernels(calibration: dict) -> dict[str, list[tuple[Kernel, float]]]:
    """{dtype or 'memory': [(kernel, measured seconds), ...]} from a calibration mapping. Each GEMM
    dtype (and ``copy``) holds one ``{shape, flops_per_s}`` entry or a list of them."""
    out: dict[str, list[tuple[Kernel, float]]] = {}
    for dtype, value in (calibration.get("gemm") or {}).items():
        for entry in _entries(value):
            k = Kernel("gemm", dtype, tuple(int(d) for d in entry["shape"]), entry.get("layout", "nn"))
            out.setdefault(dtype, []).append((k, k.flops / float(entry["flops_per_s"])))
    for entry in _entries(calibration.get("copy") or []):
        k = Kernel("copy", entry.get("dtype", "fp32"), tuple(int(d) for d in entry["shape"]))
        out.setdefault("memory", []).append((k, k.bytes / float(entry["bytes_per_s"])))
    return out


def median_s(samples_ms: list[float]) -> float:
    return statistics.median(samples_ms) * 1e-3


# --- torch parts ---------------------------------------------------------------------------------

def _torch():
    try:
        import torch
    except ImportError:
        raise PredictorError("`simulator collect` needs torch (pip install torch)") from None
    if not torch.cuda.is_available():
        raise PredictorError("`simulator collect` needs a CUDA GPU; torch sees none")
    return torch


def _gemm(torch, k: Kernel, dev) -> Callable[[], object]:
    b, m, n, kk = k.shape
    dt = getattr(torch, TORCH_DTYPES[k.dtype])
    if k.dtype == "fp8":  # e4m3 operands, per-tensor scales, bf16 output (Transformer Engine's forward)
        if b != 1 or k.layout != "nt":
            raise PredictorError(f"fp8 GEMMs are measured as un-batched nt products only, not {k}")
        a = torch.randn(m, kk, device=dev).to(dt)
        w = torch.randn(n, kk, device=dev).to(dt).t()
        one = torch.tensor(1.0, device=dev)
        return lambda: torch._scaled_mm(a, w, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    a_shape = (b, kk, m) if k.layout == "tn" else (b, m, kk)
    b_shape = (b, n, kk) if k.layout == "nt" else (b, kk, n)
    a, w = torch.randn(a_shape, device=dev, dtype=dt), torch.randn(b_shape, device=dev, dtype=dt)
    a = a.transpose(1, 2) if k.layout == "tn" else a
    w = w.transpose(1, 2) if k.layout == "nt" else w
    if b == 1:
        a, w = a[0], w[0]
        return lambda: torch.mm(a, w)
    return lambda: torch.bmm(a, w)


def _vector(torch, k: Kernel, dev) -> Callable[[], object]:
    F = torch.nn.functional
    dt = getattr(torch, TORCH_DTYPES[k.dtype])
    x = torch.randn(k.shape, device=dev, dtype=dt)
    y = torch.randn(k.shape, device=dev, dtype=dt)
    cols = k.shape[-1]
    # Backward ops run as autograd runs them. The norm has no affine weight, so its backward is the
    # input-gradient kernel alone (what ``layernorm_bwd`` describes; ``norm_weight_bwd`` is the other one);
    # torch's softmax backward launches a Mul before its row kernel (``dataset.collected_kernels``).
    if k.op in ("layernorm_bwd", "softmax_bwd", "gelu_bwd"):
        xr = x.clone().requires_grad_(True)
        fwd = {"layernorm_bwd": lambda t: F.layer_norm(t, (cols,)), "softmax_bwd": lambda t: torch.softmax(t, -1),
               "gelu_bwd": F.gelu}[k.op](xr)
        return lambda: torch.autograd.grad(fwd, xr, y, retain_graph=True)
    table = {"layernorm": lambda: F.layer_norm(x, (cols,)), "softmax": lambda: torch.softmax(x, -1),
             "rmsnorm": lambda: x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(dt),
             "add": lambda: x + y, "mul": lambda: x * y, "div": lambda: x / y, "pow": lambda: torch.pow(x, y),
             "add_scalar": lambda: x + 0.5, "mul_scalar": lambda: x * 0.5, "div_scalar": lambda: x / 0.5,
             "pow_scalar": lambda: torch.pow(x, 2.0), "gelu": lambda: F.gelu(x), "silu": lambda: F.silu(x),
             "relu": lambda: F.relu(x), "tanh": lambda: torch.tanh(x), "dropout": lambda: F.dropout(x, 0.1),
             "copy": lambda: y.copy_(x)}
    if hasattr(F, "rms_norm"):
        table["rmsnorm"] = lambda: F.rms_norm(x, (cols,))
    if k.op not in table:
        raise PredictorError(f"collect does not know how to run {k.op!r}")
    return table[k.op]


def _flash(torch, k: Kernel, dev) -> Callable[[], object]:
    batch, heads, sq, sk, d, causal = k.shape
    dt = getattr(torch, TORCH_DTYPES[k.dtype])
    q = torch.randn(batch, heads, sq, d, device=dev, dtype=dt, requires_grad=True)
    kv = [torch.randn(batch, heads, sk, d, device=dev, dtype=dt, requires_grad=True) for _ in range(2)]
    sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q, *kv, is_causal=bool(causal))  # noqa: E731
    if k.op == "flash_attn":
        return sdpa
    out = sdpa()
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, [q, *kv], grad, retain_graph=True)


def _adam(torch, k: Kernel, dev) -> Callable[[], object]:
    p = torch.nn.Parameter(torch.zeros(k.shape[0], device=dev))
    p.grad = torch.randn_like(p)
    opt = torch.optim.Adam([p], lr=1e-4, fused=True)
    return opt.step


def builder(k: Kernel) -> Callable:
    if k.family == "gemm":
        return _gemm
    if k.family == "attention":
        return _flash
    if k.op == "adam":
        return _adam
    return _vector


def _event_ms(torch, fn: Callable) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def time_kernel(torch, k: Kernel, dev, warmup: int = 5, repeats: int = 20, fn: Optional[Callable] = None) -> float:
    """Median seconds of one call of ``k`` over ``repeats`` CUDA-event timings after ``warmup`` calls
    (fewer of both for calls over ``LONG_CALL_S``; the first warm-up call decides)."""
    torch.backends.cuda.matmul.allow_tf32 = k.dtype == "tf32"
    fn = fn or builder(k)(torch, k, dev)
    first_s = _event_ms(torch, fn) * 1e-3
    if first_s > LONG_CALL_S:
        warmup, repeats = 1, max(3, min(repeats, int(TIMED_BUDGET_S / first_s)))
    for _ in range(warmup - 1):
        fn()
    return median_s([_event_ms(torch, fn) for _ in range(repeats)])


def profile_kernel(torch, fn: Callable, calls: int = PROFILED_CALLS) -> tuple[str, Optional[float]]:
    """(the CUDA kernels one call launches, ';'-joined in first-seen order; their summed device time
    per call in seconds) from ``calls`` calls under the torch profiler. Best effort: ("", None) where
    the profiler is unavailable, so a measurement never fails for want of a name."""
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    except Exception:  # noqa: BLE001  (profiler missing or broken on this machine: names are optional)
        return "", None
    if not events:
        return "", None
    names = list(dict.fromkeys(e.name for e in events))
    total_us = sum(e.time_range.end - e.time_range.start for e in events)
    return ";".join(names), total_us * 1e-6 / calls


def local_gpu_mapping(torch) -> dict:
    """The catalog entry of the local GPU, or what torch knows about it (peaks must be filled in)."""
    name = torch.cuda.get_device_name()
    try:
        from ..hardware.catalog import catalog_entry

        return catalog_entry(name)
    except (ConfigError, ImportError):  # unknown GPU, or no pyyaml to read the catalog
        props = torch.cuda.get_device_properties(0)
        return {"name": name, "sms": props.multi_processor_count, "memory_GiB": props.total_memory / 2**30,
                "l2_MiB": getattr(props, "L2_cache_size", 0) / 2**20, "todo": "add datasheet clocks, TDP, peaks"}


def run_collect(out: Path, ops: Optional[list[str]] = None, dtypes: Optional[list[str]] = None,
                quick: bool = False, warmup: int = 5, repeats: int = 20, log=print, profile: bool = True,
                kernels: Optional[list[Kernel]] = None) -> int:
    """Measure ``kernels`` (default: the default suite for ``ops`` and ``dtypes``), or calibrate with
    ``quick``, into ``out``; returns an exit code."""
    torch = _torch()
    dev = torch.device("cuda")
    out.mkdir(parents=True, exist_ok=True)
    write_mapping(out / "gpu.yaml", local_gpu_mapping(torch))
    if quick:
        return _quick(torch, dev, out, dtypes or ["fp32", "tf32", "fp16", "bf16"], log)
    suite = kernels if kernels is not None else default_suite(ops, dtypes or ("bf16", "fp32"))
    started, done = time.monotonic(), 0
    with open(out / "kernels.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for i, k in enumerate(suite):
            try:
                fn = builder(k)(torch, k, dev)
                seconds = time_kernel(torch, k, dev, warmup, repeats, fn)
                calls = 1 if seconds > LONG_CALL_S else PROFILED_CALLS
                name, profiled_s = profile_kernel(torch, fn, calls) if profile else ("", None)
                writer.writerow(csv_row(k, seconds, name, profiled_s))
                fh.flush()  # a run cut short keeps every finished row
                done += 1
            except (RuntimeError, PredictorError) as exc:  # e.g. out of memory, unsupported dtype
                log(f"skip {k}: {str(exc).splitlines()[0]}")
            fn = None
            if k.bytes > 2**30:  # hand big operands back; small ones reuse the allocator's cache
                torch.cuda.empty_cache()
            if (i + 1) % 50 == 0:
                log(f"{i + 1}/{len(suite)} kernels, {time.monotonic() - started:.0f} s")
    log(f"wrote {done} kernels to {out / 'kernels.csv'} in {time.monotonic() - started:.0f} s")
    return 0


def _quick(torch, dev, out: Path, dtypes: list[str], log) -> int:
    cal: dict = {"gpu": torch.cuda.get_device_name(), "gemm": {}}
    for dtype in dtypes:
        entries = []
        for shape in CALIBRATION_GEMMS:
            k = Kernel("gemm", dtype, shape, "nn")
            try:
                entries.append({"shape": list(shape), "flops_per_s": k.flops / time_kernel(torch, k, dev, 3, 10)})
            except RuntimeError as exc:  # dtype not supported by this GPU / torch
                log(f"skip {dtype}: {str(exc).splitlines()[0]}")
                break
        if entries:
            cal["gemm"][dtype] = entries
    copy = Kernel("copy", "fp32", CALIBRATION_COPY)
    cal["copy"] = {"shape": list(copy.shape), "dtype": "fp32", "bytes_per_s": copy.bytes / time_kernel(torch, copy, dev)}
    write_mapping(out / "calibration.yaml", cal)
    log(f"wrote {out / 'calibration.yaml'}")
    return 0
