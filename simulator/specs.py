"""Validated input types: the only shapes in which user input enters the simulator.

Every spec is a frozen pydantic model in SI units (seconds, bytes, bytes/s, FLOP/s, hertz, watts).
YAML files may use conventional units in their keys (``bandwidth_GBps``, ``latency_us``); those are
converted once by :func:`simulator.units.to_si` before validation, never later.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from .units import DTYPE_BYTES, DTYPES  # noqa: F401  (re-exported: part of the specs vocabulary)

Dtype = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]
Architecture = Literal["pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell"]
#: L1 per SM of a GPU spec that does not give it (KiB; whitepapers: GP100, GV100, TU10x, GA10x -- the
#: A100's GA100 has 192 --, AD10x, GH100, GB100).
DEFAULT_L1_KIB = {"pascal": 24, "volta": 128, "turing": 96, "ampere": 128, "ada": 128, "hopper": 256, "blackwell": 256}


class Spec(BaseModel):
    # inf / nan are no sizes, rates or times (an infinite latency deadlocked the engine)
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


#: A hop slower than this is no interconnect (1e308 us passed validation and deadlocked the engine).
MAX_HOP_LATENCY_S = 1.0


class GpuSpec(Spec):
    """One GPU model, from a vendor datasheet. Peak FLOP/s are dense (no sparsity).

    ``peak_flops_per_s['fp32']`` is the CUDA-core FP32 rate; ``tf32``, ``fp16``, ``bf16`` and ``fp8``
    are tensor-core rates where the GPU has them (``fp16`` on pre-Volta parts is the CUDA-core rate).
    ``nvlink_bandwidth_bytes_per_s`` is the GPU's total NVLink line rate per direction.
    """

    name: str
    architecture: Architecture
    sms: PositiveInt
    base_clock_hz: PositiveFloat
    boost_clock_hz: PositiveFloat
    tdp_w: PositiveFloat
    memory_bytes: PositiveFloat
    memory_bandwidth_bytes_per_s: PositiveFloat
    l2_bytes: PositiveFloat
    #: L1 data cache per SM (Volta and later: the unified L1 / shared memory); optional for inline GPUs,
    #: which then get their architecture's usual size (``DEFAULT_L1_KIB``).
    l1_bytes: PositiveFloat
    peak_flops_per_s: dict[Dtype, PositiveFloat]
    nvlink_generation: int = Field(0, ge=0)
    nvlink_links: int = Field(0, ge=0)
    nvlink_bandwidth_bytes_per_s: float = Field(0.0, ge=0)
    pcie_generation: int = Field(3, ge=1, le=6)
    pcie_lanes: PositiveInt = 16
    source: str = ""

    @model_validator(mode="after")
    def _needs_fp32(self) -> "GpuSpec":
        if "fp32" not in self.peak_flops_per_s:
            raise ValueError("peak_flops_per_s must include fp32")
        if self.boost_clock_hz < self.base_clock_hz:
            raise ValueError("boost clock below base clock")
        return self

    @model_validator(mode="before")
    @classmethod
    def _default_l1(cls, data):
        if isinstance(data, dict) and data.get("l1_bytes") is None and data.get("architecture") in DEFAULT_L1_KIB:
            data = dict(data, l1_bytes=DEFAULT_L1_KIB[data["architecture"]] * 1024.0)
        return data

    def supports(self, dtype: str) -> bool:
        return dtype in self.peak_flops_per_s


IntraKind = Literal["nvswitch", "nvlink_mesh", "nvlink_pairs", "hybrid_cube_mesh", "pcie"]
InterTopology = Literal["rail_optimized", "fat_tree"]
Transport = Literal["rdma", "socket"]


class IntraNodeSpec(Spec):
    """Fabric inside one node. Bandwidths are line rates per GPU per direction; ``efficiency`` is the
    fraction NCCL-style transfers actually reach (see ``topology.links`` for the defaults' sources).

    Kinds: ``nvswitch`` (every GPU on a non-blocking NVSwitch plane), ``nvlink_mesh`` (every pair joined
    directly, e.g. HGX-4), ``nvlink_pairs`` (PCIe cards bridged in pairs), ``hybrid_cube_mesh`` (DGX-1's
    8-GPU cube mesh), ``pcie`` (no NVLink). Every kind also has a PCIe tree: GPUs (and NICs) behind PCIe
    switches, switches on CPU sockets, sockets joined by a CPU interconnect.
    """

    kind: IntraKind
    bandwidth_bytes_per_s: Optional[PositiveFloat] = None  # default: the GPU's NVLink or PCIe rate
    latency_s: float = Field(1.0e-6, ge=0, le=MAX_HOP_LATENCY_S)
    efficiency: Optional[float] = Field(None, gt=0, le=1)
    pcie_bandwidth_bytes_per_s: Optional[PositiveFloat] = None  # GPU <-> host/NIC link; default from pcie_generation
    #: NVLink links joining two GPUs (mesh, pairs); default: the GPU's links split evenly over its peers
    nvlink_links_per_pair: Optional[PositiveInt] = None
    #: GPUs behind one PCIe switch; default: one NIC's worth of GPUs (NVLink kinds), a socket's GPUs (pcie)
    gpus_per_pcie_switch: Optional[PositiveInt] = None
    cpu_sockets: PositiveInt = 1
    #: PCIe peer-to-peer between GPUs; False routes GPU-to-GPU PCIe traffic through host memory (NCCL's SHM)
    gpu_p2p: bool = True
    cpu_interconnect_bandwidth_bytes_per_s: Optional[PositiveFloat] = None  # socket to socket, per direction
    #: NVLink SHARP (in-switch reduction); default: NVSwitch with a Hopper or later GPU
    nvls: Optional[bool] = None


class InterNodeSpec(Spec):
    """Fabric between nodes: NICs into leaf switches, leaves into spines. ``transport: socket`` is TCP
    without RDMA (NCCL's socket transport: data staged in host memory)."""

    nics_per_node: PositiveInt
    nic_bandwidth_bytes_per_s: PositiveFloat  # line rate per NIC per direction
    topology: InterTopology = "rail_optimized"
    oversubscription: float = Field(1.0, ge=1.0)  # leaf downlink : uplink bandwidth
    nodes_per_leaf: PositiveInt = 32  # fat_tree only: nodes under one leaf switch
    latency_s: float = Field(5.0e-6, ge=0, le=MAX_HOP_LATENCY_S)
    efficiency: float = Field(0.94, gt=0, le=1)
    transport: Transport = "rdma"


class ClusterSpec(Spec):
    name: str
    gpu: GpuSpec
    nodes: PositiveInt
    gpus_per_node: PositiveInt
    intra_node: IntraNodeSpec
    inter_node: Optional[InterNodeSpec] = None
    price_per_gpu_hour_usd: Optional[float] = Field(None, ge=0)

    @model_validator(mode="after")
    def _multi_node_needs_network(self) -> "ClusterSpec":
        if self.nodes > 1 and self.inter_node is None:
            raise ValueError("a cluster with more than one node needs an inter_node section")
        intra = self.intra_node
        if intra.kind == "nvlink_pairs" and self.gpus_per_node % 2:
            raise ValueError("nvlink_pairs needs an even number of GPUs per node")
        if intra.kind == "hybrid_cube_mesh" and self.gpus_per_node != 8:
            raise ValueError("hybrid_cube_mesh is DGX-1's 8-GPU topology: gpus_per_node must be 8")
        if self.gpus_per_node % intra.cpu_sockets:
            raise ValueError(f"{self.gpus_per_node} GPUs per node do not split evenly over {intra.cpu_sockets} CPU sockets")
        return self

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


class WorkloadSpec(Spec):
    """A transformer. ``ffn_hidden`` is the width of the MLP's inner layer (per gate for SwiGLU).

    ``hidden_dropout`` is the dropout probability after the embedding, the attention's output projection and
    the MLP (Megatron's ``--hidden-dropout``; Hugging Face's ``resid_pdrop``, ``hidden_dropout_prob``,
    ``dropout``), ``attention_dropout`` the one on the attention probabilities; at 0 no dropout kernel runs
    (PyTorch returns the input) and no mask is kept (Llama-style models train without dropout)."""

    name: str
    architecture: Literal["decoder", "encoder"] = "decoder"
    layers: PositiveInt
    hidden: PositiveInt
    heads: PositiveInt
    kv_heads: Optional[PositiveInt] = None
    ffn_hidden: PositiveInt
    vocab: PositiveInt
    seq_len: PositiveInt
    tied_embeddings: bool = True
    activation: Literal["gelu", "relu", "swiglu"] = "gelu"
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    position_embedding: Literal["learned", "rope", "none"] = "learned"
    bias: bool = True
    hidden_dropout: float = Field(0.1, ge=0, lt=1)
    attention_dropout: float = Field(0.1, ge=0, lt=1)

    @model_validator(mode="after")
    def _shapes(self) -> "WorkloadSpec":
        if self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} is not a multiple of heads={self.heads}")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"heads={self.heads} is not a multiple of kv_heads={self.kv_heads}")
        return self

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def num_kv_heads(self) -> int:
        return self.kv_heads or self.heads


class PlanSpec(Spec):
    """A parallel plan. ``global_batch_size`` counts sequences per optimizer step.

    ``recompute`` is activation recomputation (Korthikanti et al. 2022): ``full`` keeps only each layer's
    input and reruns the layer's forward (its tensor-parallel all-reduces included) before its backward
    (Megatron's ``--recompute-granularity full``, DeepSpeed's activation checkpointing); ``selective``
    reruns only the attention core (score, mask, softmax, dropout, context) and drops its activations,
    which flash attention already does.

    ``attention``: ``flash`` is one fused kernel each way (FlashAttention-2, SDPA); ``unfused`` is PyTorch's
    eager attention (score BMM, masked_fill, softmax, dropout, context BMM); ``fused-softmax`` is Megatron's
    default without flash attention, the score's scale, mask and softmax in one half-precision kernel each way
    (``FusedScaleMaskSoftmax``, masked-softmax fusion). ``auto``: flash for fp16/bf16, unfused otherwise.

    ``loss`` is the cross-entropy's implementation: ``fused`` reads the logits once forward and once backward
    (a fused kernel: Apex, Liger, Megatron's ``--cross-entropy-loss-fusion``); ``unfused`` is Megatron's
    default vocab-parallel cross entropy, elementwise passes over an fp32 copy of the logits."""

    dp: PositiveInt = 1
    tp: PositiveInt = 1
    pp: PositiveInt = 1
    micro_batch_size: PositiveInt = 1
    global_batch_size: PositiveInt = 1
    schedule: Literal["gpipe", "1f1b"] = "1f1b"
    dtype: Literal["fp32", "tf32", "bf16", "fp16"] = "bf16"
    attention: Literal["auto", "flash", "unfused", "fused-softmax"] = "auto"
    recompute: Literal["none", "selective", "full"] = "none"
    loss: Literal["fused", "unfused"] = "fused"
    host_overhead_s: NonNegativeFloat = 0.0  # host time to issue one kernel (0: the host always keeps up)

    @property
    def num_gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def num_micro_batches(self) -> int:
        return self.global_batch_size // (self.dp * self.micro_batch_size)

    @property
    def mixed_precision(self) -> bool:
        return self.dtype in ("bf16", "fp16")


def parse_spec(cls: type[Spec], raw: object, source: str, prefix: str = "") -> Spec:
    """Validate raw (unit-suffixed) data into ``cls``; any problem becomes a one-line ``ConfigError``.

    ``prefix`` is prepended to field paths in error messages (e.g. ``gpu.`` for an inline GPU).
    """
    from pydantic import ValidationError

    from .errors import ConfigError
    from .units import to_si

    if not isinstance(raw, dict):
        raise ConfigError(source, prefix.rstrip("."), raw, "expected a mapping of fields")
    data, renamed = to_si(raw)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        path = [renamed.get(str(p), (str(p), 1.0))[0] for p in err["loc"]]
        field = prefix + ".".join(path)
        value = err.get("input")
        factor = renamed.get(str(err["loc"][-1]), ("", 1.0))[1] if err["loc"] else 1.0
        if isinstance(value, (int, float)) and not isinstance(value, bool) and factor != 1.0:
            value = value / factor  # report the number as the user wrote it
        if isinstance(value, dict):
            value = "{...}"
        problem = err["msg"]
        bound = [(word, err["ctx"][key]) for key, word in (("le", "at most"), ("lt", "below"), ("ge", "at least"),
                                                           ("gt", "above")) if key in err.get("ctx", {})]
        if bound and factor != 1.0:  # the bound in the user's unit too
            problem = f"must be {bound[0][0]} {bound[0][1] / factor:g}"
        if err["type"] == "extra_forbidden":
            problem = "unknown field"
        elif err["type"] == "missing":
            problem, value = "required field is missing", None
        if not err["loc"]:  # a check across fields (model validator): no one field or value to name
            problem = problem.removeprefix("Value error, ")
            field, value, problem = "", None, f"{prefix.rstrip('.')}: {problem}" if prefix else problem
        raise ConfigError(source, field, value, problem) from None
