"""Parameter counts, model FLOPs and memory per GPU of a transformer under a parallel plan.

Activation memory follows Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", eq. 2 with tensor parallelism, no sequence parallelism): per layer and
micro-batch ``s*b*h*(10 + 24/t + 5*a*s/(h*t))`` bytes with 2-byte activations (the 24 generalised to
grouped-query attention, any FFN width and SwiGLU: ``_split_per_token``); scaled here by the
activation element size, with the 5as/h term (attention scores) dropped when flash attention keeps
them out of memory or selective recomputation drops them (their section 5), and the dropout masks and
outputs dropped for a model without dropout. Full recomputation keeps each layer's input, 2sbh bytes
(their section 4.1); either way the layer being back-propagated holds what it recomputed as well.
Model FLOPs per step follow Narayanan et al. 2021 (eq. 3, no recompute).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..specs import DTYPE_BYTES, PlanSpec, WorkloadSpec


def layer_params(m: WorkloadSpec) -> int:
    """Parameters of one transformer layer (attention, MLP, two norms, biases if any)."""
    d = m.head_dim
    qkv = m.hidden * (m.heads + 2 * m.num_kv_heads) * d
    proj = m.heads * d * m.hidden
    gates = 2 if m.activation == "swiglu" else 1
    mlp = m.hidden * m.ffn_hidden * (gates + 1)
    norms = (2 if m.norm == "layernorm" else 1) * 2 * m.hidden
    biases = ((m.heads + 2 * m.num_kv_heads) * d + m.hidden + gates * m.ffn_hidden + m.hidden) if m.bias else 0
    return qkv + proj + mlp + norms + biases


def embedding_params(m: WorkloadSpec) -> int:
    positions = m.seq_len * m.hidden if m.position_embedding == "learned" else 0
    return m.vocab * m.hidden + positions


def head_params(m: WorkloadSpec) -> int:
    """Final norm (+ MLM transform for encoders) and, when untied, the LM head matrix."""
    norm = (2 if m.norm == "layernorm" else 1) * m.hidden
    transform = m.hidden * m.hidden + m.hidden + 2 * m.hidden if m.architecture == "encoder" else 0
    return norm + transform + (0 if m.tied_embeddings else m.vocab * m.hidden)


def total_params(m: WorkloadSpec) -> int:
    return m.layers * layer_params(m) + embedding_params(m) + head_params(m)


def stage_params(m: WorkloadSpec, pp: int, stage: int) -> int:
    """Parameters held by one pipeline stage (before tensor-parallel sharding). With pp > 1 and tied
    embeddings the last stage keeps its own copy of the word embedding for the LM head (Megatron)."""
    params = (m.layers // pp) * layer_params(m)
    if stage == 0:
        params += embedding_params(m)
    if stage == pp - 1:
        params += head_params(m)
        if m.tied_embeddings and pp > 1:
            params += m.vocab * m.hidden
    return params


def model_flops_per_step(m: WorkloadSpec, global_batch: int) -> float:
    """Useful FLOPs of one training step (forward + backward, no recompute): Narayanan et al. eq. 3,
    generalised to any FFN width and GQA: 6 x (matmul params) x tokens + attention scores and LM head."""
    tokens = global_batch * m.seq_len
    d = m.head_dim
    gates = 2 if m.activation == "swiglu" else 1
    per_token_layer = 2 * (m.hidden * (m.heads + 2 * m.num_kv_heads) * d + m.heads * d * m.hidden
                           + m.hidden * m.ffn_hidden * (gates + 1))
    attention = 2 * 2 * m.seq_len * m.hidden  # QK^T and PV per token per layer (full, not causal-halved)
    head = 2 * m.hidden * m.vocab
    return 3.0 * tokens * (m.layers * (per_token_layer + attention) + head)


@dataclass(frozen=True)
class MemoryEstimate:
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes


def _split_per_token(m: WorkloadSpec) -> float:
    """Korthikanti's 24 (in 2-byte units of the hidden size) for the tensors tensor parallelism splits, for any
    head grouping and MLP: Q, K (for QK^T), V and the projection's input, 4 + 4 kv/heads; the MLP's activation
    input and FC2's input, 2 x 2 ffn/h for GELU / ReLU (16 at ffn = 4h), 2 x 3 ffn/h for SwiGLU (gate, up,
    product)."""
    mlp_tensors = 3 if m.activation == "swiglu" else 2
    return 4 + 4 * m.num_kv_heads / m.heads + 2 * mlp_tensors * m.ffn_hidden / m.hidden


def activation_bytes_per_layer(m: WorkloadSpec, plan: PlanSpec, flash: bool, stored: bool = True) -> float:
    """Activation bytes one layer keeps per micro-batch until its backward (``stored``), or holds while it
    runs its backward (``stored=False``: everything, recomputed or not)."""
    s, b, h, a, t = m.seq_len, plan.micro_batch_size, m.hidden, m.heads, plan.tp
    if stored and plan.recompute == "full":
        per_2byte = 2 * s * b * h
    else:
        scores = flash or (stored and plan.recompute == "selective")
        # the 10: both norms' inputs (4), QKV's and FC1's inputs (4) and the two 1-byte hidden dropout masks;
        # the 5 per score: softmax output (2), dropout mask (1) and output (2), 2 without attention dropout
        replicated = 8 + (2 if m.hidden_dropout > 0 else 0)
        per_score = 5 if m.attention_dropout > 0 else 2
        per_2byte = s * b * h * (replicated + _split_per_token(m) / t + (0 if scores else per_score * a * s / (h * t)))
    act_bytes = 4 if plan.dtype in ("fp32", "tf32") else 2
    return per_2byte * act_bytes / 2


def in_flight_micro_batches(plan: PlanSpec, stage: int) -> int:
    """Micro-batches whose activations a stage holds at peak: all of them in GPipe; pp - stage in 1F1B."""
    m = plan.num_micro_batches
    return m if plan.schedule == "gpipe" else min(m, plan.pp - stage)


def stage_memory(m: WorkloadSpec, plan: PlanSpec, stage: int, flash: bool) -> MemoryEstimate:
    """Peak memory of one GPU of ``stage``. Mixed precision keeps half weights, fp32 grads (Megatron's
    main_grad), fp32 master weights and two Adam moments: 2 + 4 + 12 bytes per parameter; fp32 keeps
    weights, grads and two moments: 4 + 4 + 8."""
    params = stage_params(m, plan.pp, stage) / plan.tp
    if plan.mixed_precision:
        weights, grads, optim = 2 * params, (2 if plan.dtype == "fp16" else 4) * params, 12 * params
    else:
        weights, grads, optim = 4 * params, 4 * params, 8 * params
    layers = m.layers // plan.pp
    stored = activation_bytes_per_layer(m, plan, flash)
    # plus what the layer being back-propagated has recomputed
    acts = stored * layers * in_flight_micro_batches(plan, stage) + (
        activation_bytes_per_layer(m, plan, flash, stored=False) - stored)
    if stage == plan.pp - 1:  # logits (+ their fp32 copy in the loss) of the micro-batch in flight
        tokens = plan.micro_batch_size * m.seq_len
        acts += tokens * (m.vocab / plan.tp) * (DTYPE_BYTES[plan.dtype] + 4)
    return MemoryEstimate(weights, grads, optim, acts)
