"""Predictor subcommands: ``predict-kernels`` and ``fit-predictor`` (``collect`` lives in ``collect``).

``register(subparsers)`` adds them to the CLI; each handler returns an exit code and raises
``ConfigError`` / ``PredictorError`` for user mistakes (the CLI prints those as one line, status 2).
"""
from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

from ..errors import ConfigError
from ..specs import GpuSpec
from .kernel_csv import open_text, read_kernel_rows


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("predict-kernels", help="predict kernel latencies for rows of a CSV (NeuSight format)")
    p.add_argument("--gpu", required=True, help="catalog GPU name or a GPU YAML file")
    p.add_argument("--input", required=True, help="CSV with OPName and B,M,N,K (GEMMs) or B,H (vector ops), or the "
                   "kernels.csv `simulator collect` wrote; measured times in it are compared on stderr")
    p.add_argument("--output", required=True, help="CSV to write (- for stdout): the input rows plus predicted_ms")
    p.add_argument("--predictor", default="mlp", help="mlp | roofline (default mlp)")
    p.add_argument("--calibration", help="calibration file from `simulator collect --quick` (mlp only)")
    p.add_argument("--weights", metavar="DIR", help="MLP weights written by `simulator fit-predictor --out DIR` "
                   "(default: the shipped ones)")
    p.set_defaults(handler=predict_kernels)

    p = subparsers.add_parser("fit-predictor", help="train the kernel MLP on measured data (needs torch)")
    p.add_argument("--data", help="measured data folder (default $SIMULATOR_DATA or ../shared/data)")
    p.add_argument("--out", required=True, help="folder to write kernel_mlp.npz and kernel_mlp.json")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default: the shipped setting)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch threads (default: the shipped setting, 2)")
    p.add_argument("--collected", nargs="+", default=[], metavar="DIR",
                   help="also train on these folders written by `simulator collect --out` (your own GPU's kernels)")
    p.set_defaults(handler=fit_predictor)


def resolve_gpu_arg(value: str) -> GpuSpec:
    """A catalog name, or a YAML file with a GPU mapping (catalog fields, optionally ``base: NAME``)."""
    import yaml

    from ..hardware.catalog import resolve_gpu

    path = Path(value)
    if value.endswith((".yaml", ".yml")) or path.is_file():
        if not path.is_file():
            raise ConfigError("command line", "--gpu", value, "file not found")
        raw = yaml.safe_load(path.read_text())
        return resolve_gpu(raw.get("gpu", raw) if isinstance(raw, dict) else raw, str(path))
    return resolve_gpu(value, "command line", "--gpu")


def predict_kernels(args: argparse.Namespace) -> int:
    from . import get_predictor

    gpu = resolve_gpu_arg(args.gpu)
    source = args.input
    rows, columns, kernels = read_kernel_rows(source)
    for line, k in enumerate(kernels, start=2):
        if k.family in ("gemm", "attention") and not gpu.supports(k.dtype):
            raise ConfigError(source, f"line {line}: dtype", k.dtype, f"{gpu.name} has no {k.dtype} matrix "
                              f"support (it has {', '.join(sorted(gpu.peak_flops_per_s))})")
    predictor = get_predictor(args.predictor, calibration=args.calibration, weights=args.weights)
    seconds = _call_seconds(predictor, rows, kernels, gpu, collect_format="OPName" not in columns)
    out_columns = columns + ([] if "predicted_ms" in columns else ["predicted_ms"])
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=out_columns, extrasaction="ignore")
    writer.writeheader()
    for row, t in zip(rows, seconds):
        writer.writerow(dict(row, predicted_ms=f"{t * 1e3:.6g}"))
    if args.output == "-":
        sys.stdout.write(text.getvalue())
    else:
        try:
            with open_text(args.output, "w") as fh:
                fh.write(text.getvalue())
        except OSError as exc:
            raise ConfigError("command line", "--output", args.output, f"cannot write: {exc.strerror}") from None
    for line in measured_summary(rows, kernels, seconds):
        print(line, file=sys.stderr)
    return 0


def _call_seconds(predictor, rows, kernels, gpu, collect_format: bool) -> list[float]:
    """Each row's predicted time. A row of ``collect``'s format is the torch call it timed: where its
    ``kernel_name`` shows the call ran more than the kernel (PyTorch's softmax backward runs a Mul first;
    ``dataset.collected_kernels``), the prediction is the sum of those kernels', as training reads the row."""
    from .dataset import collected_kernels

    calls = ([collected_kernels(k, row.get("kernel_name") or "") for row, k in zip(rows, kernels)] if collect_format
             else [(k,) for k in kernels])
    flat = predictor.latency_s([k for call in calls for k in call], gpu)
    out, i = [], 0
    for call in calls:
        out.append(float(sum(flat[i:i + len(call)])))
        i += len(call)
    return out


#: Measured-time columns ``predict-kernels`` compares its predictions with, per row the first present: ``collect``'s
#: device time and CUDA-event median (seconds), NeuSight's ``Latency`` (ms, CUDA events around the op call).
MEASURED_COLUMNS = (("profiled_s", 1.0), ("latency_s", 1.0), ("Latency", 1e-3))


def measured_s(row: dict[str, str]) -> float | None:
    for column, scale in MEASURED_COLUMNS:
        try:
            value = float(row.get(column) or "nan") * scale
        except ValueError:
            continue
        if 0 < value < float("inf"):
            return value
    return None


def measured_summary(rows: list[dict[str, str]], kernels, seconds) -> list[str]:
    """Lines comparing the predictions with the rows' measured times (``MEASURED_COLUMNS``), overall and per op
    and dtype: MAPE and median predicted / measured. Empty where no row has a measured time."""
    groups: dict[str, list[float]] = {}
    for row, k, t in zip(rows, kernels, seconds):
        m = measured_s(row)
        if m is not None:
            groups.setdefault(f"{k.op} {k.dtype}", []).append(t / m)
            groups.setdefault("all", []).append(t / m)
    if not groups:
        return []
    from .evaluation import ratio_stats

    def line(name: str, ratios: list[float]) -> str:
        s = ratio_stats(ratios)
        return f"#   {name:<22} n={s['n']:<6} MAPE {s['mape']:6.1f} %   median predicted/measured {s['median_ratio']:.2f}"

    head = f"# predicted vs measured ({', '.join(c for c, _ in MEASURED_COLUMNS)}: the first present per row)"
    return [head, line("all", groups.pop("all"))] + [line(k, v) for k, v in sorted(groups.items())]


def fit_predictor(args: argparse.Namespace) -> int:
    from .training import train_and_export

    train_and_export(args.data, Path(args.out), epochs=args.epochs, seed=args.seed, log=print, threads=args.threads,
                     collected=[Path(c) for c in args.collected])
    return 0
