"""Command line: parse -> call the API -> print -> exit code (0 ok, 2 user error).

Every user mistake (bad flag, missing file, invalid field, infeasible plan) prints one line on stderr
and exits with status 2; anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from .errors import ConfigError, SimulatorError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: one line, status 2
        raise ConfigError("command line", "", None, message)


def write_output(target: str, text: str, flag: str) -> None:
    """Write ``text`` to a file, or stdout for ``-``."""
    if target == "-":
        sys.stdout.write(text + "\n")
        return
    try:
        Path(target).write_text(text + "\n")
    except OSError as exc:
        raise ConfigError("command line", flag, target, f"cannot write: {exc.strerror}") from None


def _add_simulate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="simulate one training step of a plan")
    p.add_argument("--cluster", required=True, help="cluster name (topologies/) or YAML path")
    p.add_argument("--workload", required=True, help="model name (workloads/), YAML or HF config.json path")
    p.add_argument("--nodes", type=int, help="use this many nodes of the cluster")
    p.add_argument("--seq-len", type=int, help="override the model's sequence length")
    for flag in ("dp", "tp", "pp"):
        p.add_argument(f"--{flag}", type=int, default=1, help=f"{flag} degree (default 1)")
    p.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch (default 1)")
    p.add_argument("--global-batch", type=int, help="sequences per optimizer step (default dp x micro-batch)")
    p.add_argument("--schedule", default="1f1b", help="pipeline schedule: gpipe | 1f1b (default 1f1b)")
    p.add_argument("--dtype", default="bf16", help="fp32 | tf32 | bf16 | fp16 (default bf16 mixed precision)")
    p.add_argument("--attention", default="auto",
                   help="auto | flash | unfused | fused-softmax (Megatron's scale-mask-softmax kernel) "
                   "(default: flash for bf16/fp16, unfused otherwise)")
    p.add_argument("--recompute", default="none",
                   help="activation recomputation: none | selective (attention core) | full (every layer)")
    p.add_argument("--loss", default="fused",
                   help="cross entropy: fused (one kernel each way) | unfused (Megatron's fp32 passes)")
    p.add_argument("--host-overhead-us", type=float,
                   help="host time to issue one kernel, in us (default 0: the host keeps up; eager "
                        "Megatron-DeepSpeed: about 60)")
    p.add_argument("--predictor", default=None, help="kernel predictor: mlp | roofline (default: mlp if shipped)")
    p.add_argument("--calibration", metavar="FILE",
                   help="calibration from `simulator collect --quick` on the target GPU (mlp predictor)")
    p.add_argument("--weights", metavar="DIR",
                   help="MLP weights written by `simulator fit-predictor --out DIR` (default: the shipped ones)")
    p.add_argument("--full", action="store_true", help="simulate every rank instead of one per stage")
    p.add_argument("--json", metavar="FILE|-", help="write the result as JSON")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome trace (open in Perfetto)")
    p.set_defaults(handler=_simulate)


def _simulate(args: argparse.Namespace) -> int:
    from . import api
    from .loading import load_cluster, load_plan, load_workload
    from .report.chrome_trace import chrome_trace
    from .report.summary import format_summary

    cluster = load_cluster(args.cluster, args.nodes)
    workload = load_workload(args.workload, args.seq_len)
    global_batch = args.global_batch if args.global_batch is not None else args.dp * args.micro_batch
    plan = load_plan(dict(dp=args.dp, tp=args.tp, pp=args.pp, micro_batch_size=args.micro_batch,
                          global_batch_size=global_batch, schedule=args.schedule, dtype=args.dtype,
                          attention=args.attention, recompute=args.recompute, loss=args.loss,
                          host_overhead_us=args.host_overhead_us))
    predictor = args.predictor or api.default_predictor()
    if args.calibration or args.weights:
        from .predictor import get_predictor

        predictor = get_predictor(predictor, calibration=args.calibration, weights=args.weights)
    result = api.simulate(cluster, workload, plan, predictor=predictor, collapse=not args.full,
                          keep_trace=bool(args.trace))
    if args.json != "-":
        print(format_summary(result))
    if args.json:
        write_output(args.json, json.dumps(result.to_json(), indent=2), "--json")
    if args.trace:
        write_output(args.trace, json.dumps(chrome_trace(result.trace)), "--trace")
    return 0


def _registrars() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Subcommand groups: simulate here; predictor and collective commands in their packages."""
    out = [_add_simulate]
    try:
        from .predictor.commands import register as predictor_commands
        out.append(predictor_commands)
    except ImportError:
        pass
    from .predictor.collect import register as collect_command  # imports without pydantic: GPU machines

    out.append(collect_command)
    try:
        from .collectives.commands import register as collective_commands
        out.append(collective_commands)
    except ImportError:
        pass
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="simulator", description="Distributed-training planning simulator")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "handler", None):
            parser.print_help()
            return 2
        return args.handler(args)
    except SimulatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early
        sys.stderr.close()
        return 0
