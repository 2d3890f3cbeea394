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
    p.add_argument("--input", required=True, help="CSV with OPName and B,M,N,K (GEMMs) or B,H (vector ops)")
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
    seconds = predictor.latency_s(kernels, gpu)
    out_columns = columns + ([] if "predicted_ms" in columns else ["predicted_ms"])
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=out_columns, extrasaction="ignore")
    writer.writeheader()
    for row, t in zip(rows, seconds):
        writer.writerow(dict(row, predicted_ms=f"{t * 1e3:.6g}"))
    if args.output == "-":
        sys.stdout.write(text.getvalue())
        return 0
    try:
        with open_text(args.output, "w") as fh:
            fh.write(text.getvalue())
    except OSError as exc:
        raise ConfigError("command line", "--output", args.output, f"cannot write: {exc.strerror}") from None
    return 0


def fit_predictor(args: argparse.Namespace) -> int:
    from .training import train_and_export

    train_and_export(args.data, Path(args.out), epochs=args.epochs, seed=args.seed, log=print, threads=args.threads,
                     collected=[Path(c) for c in args.collected])
    return 0
