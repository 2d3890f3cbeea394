import json

import pytest

from simulator.errors import ConfigError
from simulator.hardware import catalog_names, load_gpu, resolve_gpu
from simulator.loading import load_cluster, load_plan, load_workload

REQUIRED = ["P4", "P100-PCIE-16GB", "V100-PCIE-32GB", "V100-SXM2-32GB", "T4", "A10G", "L4", "L40S",
            "A100-PCIE-40GB", "A100-SXM4-40GB", "A100-PCIE-80GB", "A100-SXM4-80GB", "H100-PCIE-80GB",
            "H100-SXM5-80GB", "H200-SXM-141GB", "B200"]


@pytest.mark.parametrize("name", REQUIRED)
def test_catalog_has_required_gpus_with_sources(name):
    gpu = load_gpu(name)
    assert gpu.source and gpu.sms > 0 and gpu.peak_flops_per_s["fp32"] > 0
    assert gpu.memory_bandwidth_bytes_per_s > 1e11


def test_catalog_entries_are_physically_consistent():
    for name in catalog_names():
        g = load_gpu(name)
        for dtype in ("fp16", "bf16", "tf32", "fp8"):
            if dtype in g.peak_flops_per_s and g.architecture != "pascal":
                assert g.peak_flops_per_s[dtype] >= g.peak_flops_per_s["fp32"], (name, dtype)


def test_aliases_resolve():
    assert load_gpu("NVIDIA_H100_80GB_HBM3").name == "H100-SXM5-80GB"
    assert load_gpu("Tesla T4").name == "T4"
    assert load_gpu("nvidia a100-sxm4-40gb").name == "A100-SXM4-40GB"


def test_unknown_gpu_is_config_error():
    with pytest.raises(ConfigError, match="unknown GPU"):
        resolve_gpu("A100-XYZ", "c.yaml")


def test_inline_gpu_with_base_override():
    gpu = resolve_gpu({"base": "A100-SXM4-80GB", "name": "A100-slow", "memory_bandwidth_GBps": 1000}, "c.yaml")
    assert gpu.name == "A100-slow" and gpu.memory_bandwidth_bytes_per_s == 1e12 and gpu.sms == 108


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-h100", "hgx-a100-4gpu-40gb", "l4x4-pcie", "dgx-h100-128node"])
def test_shipped_clusters_load(name):
    c = load_cluster(name)
    assert c.num_gpus >= 4


def test_nodes_override():
    assert load_cluster("dgx-h100-128node", nodes=2).num_gpus == 16
    with pytest.raises(ConfigError, match="has only 128 nodes"):
        load_cluster("dgx-h100-128node", nodes=129)
    with pytest.raises(ConfigError, match="at least 1"):
        load_cluster("dgx-h100-128node", nodes=0)


@pytest.mark.parametrize("name", ["gpt2-large", "gpt3-1.3b", "gpt3-175b", "bert-large", "llama3-8b"])
def test_shipped_workloads_load(name):
    assert load_workload(name).layers > 0


def test_hf_config(tmp_path):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8,
           "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    w = load_workload(str(p))
    assert (w.kv_heads, w.activation, w.norm, w.seq_len) == (2, "swiglu", "rmsnorm", 256)
    assert (w.hidden_dropout, w.attention_dropout) == (0.0, 0.0)  # Llama has no hidden dropout


@pytest.mark.parametrize("cfg,expected", [
    ({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 128,
      "resid_pdrop": 0.2, "attn_pdrop": 0.05}, (0.2, 0.05)),
    ({"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
      "intermediate_size": 256, "vocab_size": 100}, (0.1, 0.1)),
    ({"model_type": "opt", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "ffn_dim": 256,
      "vocab_size": 100, "dropout": 0.1, "attention_dropout": 0.0}, (0.1, 0.0)),
])
def test_hf_config_dropout(tmp_path, cfg, expected):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    w = load_workload(str(p))
    assert (w.hidden_dropout, w.attention_dropout) == expected


def test_dropout_probability_out_of_range_is_a_config_error(tmp_path):
    p = tmp_path / "w.yaml"
    p.write_text("name: w\nlayers: 2\nhidden: 64\nheads: 4\nffn_hidden: 256\nvocab: 100\nseq_len: 128\n"
                 "hidden_dropout: 1.5\n")
    with pytest.raises(ConfigError) as exc:
        load_workload(str(p))
    assert exc.value.field == "hidden_dropout"


def test_cluster_errors_name_file_and_field(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("gpu: L4\nnodes: 1\ngpus_per_node: 4\nintra_node: {kind: nvswitch}\n")
    with pytest.raises(ConfigError) as exc:
        load_cluster(str(p))
    assert exc.value.source == str(p) and exc.value.field == "intra_node.kind"
    p.write_text("gpu: L4\nnodes: 2\ngpus_per_node: 4\nintra_node: {kind: pcie}\n")
    with pytest.raises(ConfigError, match="inter_node"):
        load_cluster(str(p))


def test_missing_file_lists_shipped_names():
    with pytest.raises(ConfigError, match="dgx-a100"):
        load_cluster("nope")


def test_plan_errors_name_the_flag():
    with pytest.raises(ConfigError) as exc:
        load_plan({"dp": -1})
    assert exc.value.field == "--dp"
    with pytest.raises(ConfigError) as exc:
        load_plan({"micro_batch_size": 0})
    assert exc.value.field == "--micro-batch"
