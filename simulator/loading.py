"""Files -> specs. Names resolve to the shipped ``topologies/`` and ``workloads/`` YAMLs (in the current
directory first, then beside the package); anything else is a path. Hugging Face ``config.json`` files
are mapped to a WorkloadSpec here, in one place per model family.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import yaml

from .errors import ConfigError
from .hardware.catalog import resolve_gpu
from .topology.graph import intra_bandwidth
from .specs import ClusterSpec, PlanSpec, WorkloadSpec, parse_spec

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = (".yaml", ".yml", ".json")


def search_dirs(kind: str) -> list[Path]:
    dirs = [Path.cwd() / kind, PROJECT_ROOT / kind]
    return list(dict.fromkeys(d for d in dirs if d.is_dir()))


def known_names(kind: str) -> list[str]:
    return sorted({p.stem for d in search_dirs(kind) for p in d.iterdir() if p.suffix in SUFFIXES})


def resolve_file(value: str, kind: str, flag: str) -> Path:
    """A path, or the name of a file in ``kind`` ('topologies' or 'workloads')."""
    path = Path(value)
    if path.is_file():
        return path
    if not any(sep in value for sep in "/\\") and path.suffix not in SUFFIXES:
        for d in search_dirs(kind):
            for suffix in SUFFIXES:
                if (d / f"{value}{suffix}").is_file():
                    return d / f"{value}{suffix}"
    known = ", ".join(known_names(kind)) or "none found"
    raise ConfigError("command line", flag, value, f"no such file or shipped name (shipped: {known})")


def read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), "", None, f"cannot read file: {exc.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(str(path), "", None, f"not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {first}") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", type(data).__name__, "expected a mapping at the top level")
    return data


def cluster_from_mapping(raw: dict[str, Any], source: str, default_name: str = "cluster",
                         nodes: Optional[int] = None) -> ClusterSpec:
    if "gpu" not in raw:
        raise ConfigError(source, "gpu", None, "required field is missing")
    data = dict(raw)
    data.setdefault("name", default_name)
    data["gpu"] = resolve_gpu(raw["gpu"], source)
    if nodes is not None:
        available = raw.get("nodes")
        if nodes < 1:
            raise ConfigError("command line", "--nodes", nodes, "must be at least 1")
        if isinstance(available, int) and nodes > available:
            plural = "s" if available > 1 else ""
            raise ConfigError("command line", "--nodes", nodes,
                              f"the cluster '{data['name']}' has only {available} node{plural}")
        data["nodes"] = nodes
    cluster = parse_spec(ClusterSpec, data, source)
    try:
        intra_bandwidth(cluster)  # a fabric the GPU cannot have (NVLink kinds on a PCIe-only GPU)
    except ValueError as exc:
        raise ConfigError(source, "intra_node.kind", cluster.intra_node.kind, str(exc)) from None
    return cluster  # type: ignore[return-value]


def load_cluster(value: str, nodes: Optional[int] = None) -> ClusterSpec:
    """Cluster by shipped name or path; ``nodes`` overrides the node count (use part of a cluster)."""
    path = resolve_file(value, "topologies", "--cluster")
    return cluster_from_mapping(read_mapping(path), str(path), path.stem, nodes)


# Hugging Face config.json -> WorkloadSpec fields, one mapping per model family.
def _hf_gpt2(c: dict) -> dict:
    h = c["n_embd"]
    return dict(layers=c["n_layer"], hidden=h, heads=c["n_head"], ffn_hidden=c.get("n_inner") or 4 * h,
                vocab=c["vocab_size"], seq_len=c.get("n_positions") or c.get("n_ctx"),
                activation="relu" if c.get("activation_function") == "relu" else "gelu",
                hidden_dropout=c.get("resid_pdrop", 0.1), attention_dropout=c.get("attn_pdrop", 0.1))


def _hf_bert(c: dict) -> dict:
    return dict(architecture="encoder", layers=c["num_hidden_layers"], hidden=c["hidden_size"],
                heads=c["num_attention_heads"], ffn_hidden=c["intermediate_size"], vocab=c["vocab_size"],
                seq_len=c.get("max_position_embeddings", 512), hidden_dropout=c.get("hidden_dropout_prob", 0.1),
                attention_dropout=c.get("attention_probs_dropout_prob", 0.1))


def _hf_opt(c: dict) -> dict:
    return dict(layers=c["num_hidden_layers"], hidden=c["hidden_size"], heads=c["num_attention_heads"],
                ffn_hidden=c["ffn_dim"], vocab=c["vocab_size"], seq_len=c.get("max_position_embeddings", 2048),
                activation="relu" if c.get("activation_function", "relu") == "relu" else "gelu",
                tied_embeddings=c.get("tie_word_embeddings", True), hidden_dropout=c.get("dropout", 0.1),
                attention_dropout=c.get("attention_dropout", 0.0))


def _hf_llama(c: dict) -> dict:
    return dict(layers=c["num_hidden_layers"], hidden=c["hidden_size"], heads=c["num_attention_heads"],
                kv_heads=c.get("num_key_value_heads"), ffn_hidden=c["intermediate_size"], vocab=c["vocab_size"],
                seq_len=min(c.get("max_position_embeddings", 4096), 8192), activation="swiglu", norm="rmsnorm",
                position_embedding="rope", bias=False, tied_embeddings=c.get("tie_word_embeddings", False),
                hidden_dropout=0.0, attention_dropout=c.get("attention_dropout", 0.0))


HF_FAMILIES = {"gpt2": _hf_gpt2, "bert": _hf_bert, "roberta": _hf_bert, "opt": _hf_opt, "llama": _hf_llama,
               "mistral": _hf_llama, "qwen2": _hf_llama}


def workload_from_hf(c: dict, source: str, name: str) -> dict:
    family = c.get("model_type")
    mapper = HF_FAMILIES.get(family)
    if mapper is None:
        raise ConfigError(source, "model_type", family, f"unsupported Hugging Face model type (supported: {', '.join(HF_FAMILIES)})")
    try:
        fields = mapper(c)
    except KeyError as exc:
        raise ConfigError(source, str(exc.args[0]), None, "required Hugging Face config field is missing") from None
    return dict({k: v for k, v in fields.items() if v is not None}, name=name)


def load_workload(value: str, seq_len: Optional[int] = None) -> WorkloadSpec:
    """Workload by shipped name, YAML path or Hugging Face config.json; ``seq_len`` overrides."""
    path = resolve_file(value, "workloads", "--workload")
    raw = read_mapping(path)
    if "model_type" in raw:
        raw = workload_from_hf(raw, str(path), path.stem)
    raw.setdefault("name", path.stem)
    if seq_len is not None:
        if seq_len < 1:
            raise ConfigError("command line", "--seq-len", seq_len, "must be at least 1")
        raw = dict(raw, seq_len=seq_len)
    return parse_spec(WorkloadSpec, raw, str(path))  # type: ignore[return-value]


def load_plan(raw: dict[str, Any], source: str = "command line") -> PlanSpec:
    """A plan from flag values (``None`` = default). Errors name the flag (``--tp``)."""
    data = {k: v for k, v in raw.items() if v is not None}
    try:
        return parse_spec(PlanSpec, data, source)  # type: ignore[return-value]
    except ConfigError as exc:
        flag = "--" + exc.field.replace("_size", "").replace("_", "-") if source == "command line" else exc.field
        raise ConfigError(source, flag, exc.value, exc.problem) from None
