"""Shared fixtures: small specs built in code, and the one locator of ../shared/data."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from simulator.hardware import load_gpu
from simulator.specs import ClusterSpec, InterNodeSpec, IntraNodeSpec, PlanSpec, WorkloadSpec

ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir() -> Path | None:
    env = os.environ.get("SIMULATOR_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(ROOT.parent / "shared" / "data")
    return next((p for p in candidates if p.is_dir()), None)


@pytest.fixture
def shared_data() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip("../shared/data not available")
    return path


def make_cluster(gpus_per_node=4, nodes=1, kind="nvswitch", gpu="A100-SXM4-40GB", intra_bw=None,
                 intra_latency=1e-6, nic_bw=25e9, nics=None, inter_latency=5e-6, **inter) -> ClusterSpec:
    inter_spec = None
    if nodes > 1:
        inter_spec = InterNodeSpec(nics_per_node=nics or gpus_per_node, nic_bandwidth_bytes_per_s=nic_bw,
                                   latency_s=inter_latency, **inter)
    return ClusterSpec(name="test", gpu=load_gpu(gpu), nodes=nodes, gpus_per_node=gpus_per_node,
                       intra_node=IntraNodeSpec(kind=kind, bandwidth_bytes_per_s=intra_bw, latency_s=intra_latency),
                       inter_node=inter_spec)


def tiny_model(**overrides) -> WorkloadSpec:
    fields = dict(name="tiny", layers=4, hidden=256, heads=8, ffn_hidden=1024, vocab=1000, seq_len=128)
    fields.update(overrides)
    return WorkloadSpec(**fields)


def plan(**fields) -> PlanSpec:
    fields.setdefault("global_batch_size", fields.get("dp", 1) * fields.get("micro_batch_size", 1))
    return PlanSpec(**fields)


@pytest.fixture
def gpt2_large() -> WorkloadSpec:
    return WorkloadSpec(name="gpt2-large", layers=36, hidden=1280, heads=20, ffn_hidden=5120, vocab=50257,
                        seq_len=1024)


# Property tests draw the same examples on every run (deterministic CI); raise max_examples locally
# with HYPOTHESIS_PROFILE=explore to search harder.
from hypothesis import settings as _settings  # noqa: E402

_settings.register_profile("ci", derandomize=True)
_settings.register_profile("explore", max_examples=500)
_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
