import re

import pytest

from simulator.errors import ConfigError
from simulator.specs import GpuSpec, IntraNodeSpec, PlanSpec, WorkloadSpec, parse_spec
from simulator.units import si_key, to_si


def test_si_key_converts_known_suffixes():
    assert si_key("bandwidth_GBps") == ("bandwidth_bytes_per_s", 1e9)
    assert si_key("nic_bandwidth_Gbps") == ("nic_bandwidth_bytes_per_s", 1e9 / 8)
    assert si_key("latency_us") == ("latency_s", 1e-6)
    assert si_key("memory_GiB") == ("memory_bytes", 2**30)
    assert si_key("layers") == ("layers", 1.0)


def test_to_si_scales_nested_dicts_and_remembers_names():
    data, renamed = to_si({"peak_TFLOPS": {"fp32": 19.5}, "inner": {"latency_us": 2}})
    assert data == {"peak_flops_per_s": {"fp32": 19.5e12}, "inner": {"latency_s": 2e-6}}
    assert renamed["peak_flops_per_s"] == ("peak_TFLOPS", 1e12)


def test_parse_spec_error_names_field_as_written_with_original_value():
    raw = dict(name="g", architecture="ampere", sms=1, base_clock_MHz=1, boost_clock_MHz=2, tdp_W=1,
               memory_GiB=1, memory_bandwidth_GBps=-5, l2_MiB=1, peak_TFLOPS={"fp32": 1})
    with pytest.raises(ConfigError) as exc:
        parse_spec(GpuSpec, raw, "f.yaml")
    assert exc.value.field == "memory_bandwidth_GBps" and exc.value.value == -5
    assert str(exc.value).startswith("f.yaml: memory_bandwidth_GBps = -5")


def test_gpu_l1_defaults_to_the_architectures_and_is_validated():
    raw = dict(name="g", architecture="hopper", sms=1, base_clock_MHz=1, boost_clock_MHz=2, tdp_W=1,
               memory_GiB=1, memory_bandwidth_GBps=5, l2_MiB=1, peak_TFLOPS={"fp32": 1})
    assert parse_spec(GpuSpec, raw, "f.yaml").l1_bytes == 256 * 1024
    assert parse_spec(GpuSpec, dict(raw, l1_KiB=192), "f.yaml").l1_bytes == 192 * 1024
    with pytest.raises(ConfigError) as exc:
        parse_spec(GpuSpec, dict(raw, l1_KiB=0), "f.yaml")
    assert exc.value.field == "l1_KiB"


@pytest.mark.parametrize("latency_us,problem", [(float("inf"), "finite number"), (2e6, "must be at most 1e+06"),
                                                (-1, "must be at least 0")])
def test_link_latency_is_finite_and_bounded_in_the_users_unit(latency_us, problem):
    """An infinite or absurd hop latency deadlocked the engine (a traceback); the bound reads in microseconds."""
    raw = {"kind": "nvswitch", "latency_us": latency_us}
    with pytest.raises(ConfigError, match=re.escape(problem)) as exc:
        parse_spec(IntraNodeSpec, raw, "c.yaml", "intra_node.")
    assert exc.value.field == "intra_node.latency_us"
    assert parse_spec(IntraNodeSpec, dict(raw, latency_us=1e6), "c.yaml").latency_s == 1.0


def test_a_check_across_fields_reads_as_one_plain_line():
    """A model validator's error has no field: it read 'gpu. = '{...}': Value error, boost clock below base clock'."""
    raw = dict(name="g", architecture="ampere", sms=1, base_clock_MHz=2, boost_clock_MHz=1, tdp_W=1,
               memory_GiB=1, memory_bandwidth_GBps=5, l2_MiB=1, peak_TFLOPS={"fp32": 1})
    with pytest.raises(ConfigError) as exc:
        parse_spec(GpuSpec, raw, "c.yaml", "gpu.")
    assert str(exc.value) == "c.yaml: gpu: boost clock below base clock"


def test_parse_spec_rejects_unknown_fields():
    with pytest.raises(ConfigError, match="unknown field"):
        parse_spec(PlanSpec, {"dp": 1, "bogus": 2}, "plan")


def test_workload_validates_head_divisibility():
    with pytest.raises(ValueError):
        WorkloadSpec(name="x", layers=1, hidden=100, heads=7, ffn_hidden=4, vocab=5, seq_len=8)


def test_plan_micro_batches():
    p = PlanSpec(dp=2, micro_batch_size=2, global_batch_size=16)
    assert p.num_micro_batches == 4 and p.num_gpus == 2
