"""The sizes of a Qwen3.5-architecture (Qwen3.6) checkpoint, as config.json states them: the
served model's shape for the arithmetic that needs it before the model is on a host (the KV-cache
fit of roles/vllm/kv_budget.py), and for lab/tiny, which writes checkpoints of any such shape.

Pure (no pyinfra): lab/tiny runs on machines without it (benchmarks/gpu-serve).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """The sizes of a Qwen3.5-architecture checkpoint (Qwen3_5TextConfig's fields, vLLM 0.22.1's
    vllm/transformers_utils/configs/qwen3_5.py): :data:`QWEN36_27B` for the real model's text
    shape, lab/tiny's ``TINY`` for the lab. Every tensor and config value lab/tiny writes comes
    from one.

    Units: sizes in features, heads and layers; ``group`` in input features per AutoRound scale.
    """

    name: str
    vocab: int  # config vocab_size (embedding and lm_head rows)
    hidden: int
    intermediate: int
    num_layers: int
    full_attention_interval: int  # every n-th layer is full attention, the rest gated delta net
    heads: int  # full attention: query heads (q_proj is twice this: query + output gate)
    kv_heads: int
    head_dim: int
    partial_rotary: float
    mrope_section: tuple[int, ...]  # sums to head_dim * partial_rotary / 2
    lin_k_heads: int  # gated delta net (linear attention)
    lin_v_heads: int
    lin_k_dim: int
    lin_v_dim: int
    conv_k: int
    mtp_layers: int
    group: int  # AutoRound group size
    #: the vision tower's sizes (kept tiny at every size: rigup serves the model text-only)
    vision: tuple[tuple[str, int], ...] = (
        ("depth", 2), ("hidden_size", 64), ("intermediate_size", 128), ("num_heads", 2),
        ("patch_size", 16), ("temporal_patch_size", 2), ("spatial_merge_size", 2),
        ("num_position_embeddings", 64),
    )  # fmt: skip

    @property
    def layer_types(self) -> list[str]:
        """``"full_attention"`` at every ``full_attention_interval``-th layer (3, 7, ... for 4),
        ``"linear_attention"`` elsewhere, as Qwen3.5's config lists them."""
        n = self.full_attention_interval
        return [
            "full_attention" if (i + 1) % n == 0 else "linear_attention"
            for i in range(self.num_layers)
        ]

    @property
    def key_dim(self) -> int:
        return self.lin_k_heads * self.lin_k_dim

    @property
    def value_dim(self) -> int:
        return self.lin_v_heads * self.lin_v_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the gated delta net's causal conv: query, key and value."""
        return 2 * self.key_dim + self.value_dim

    @property
    def vision_sizes(self) -> dict[str, int]:
        return dict(self.vision)

    @classmethod
    def from_config(cls, config: dict) -> Shape:
        """The shape a Qwen3.5/3.6 config.json states (its ``text_config``; AutoRound's
        ``group_size``, 128 when unquantized). Raises KeyError naming a missing field."""
        t = config.get("text_config") or config
        q = config.get("quantization_config") or {}
        layers, interval = t["num_hidden_layers"], t["full_attention_interval"]
        return cls(
            name=config.get("model_type") or "config.json",
            vocab=t["vocab_size"],
            hidden=t["hidden_size"],
            intermediate=t["intermediate_size"],
            num_layers=layers,
            full_attention_interval=interval,
            heads=t["num_attention_heads"],
            kv_heads=t["num_key_value_heads"],
            head_dim=t["head_dim"],
            partial_rotary=t.get("partial_rotary_factor", 0.25),
            mrope_section=tuple((t.get("rope_parameters") or {}).get("mrope_section") or ()),
            lin_k_heads=t["linear_num_key_heads"],
            lin_v_heads=t["linear_num_value_heads"],
            lin_k_dim=t["linear_key_head_dim"],
            lin_v_dim=t["linear_value_head_dim"],
            conv_k=t["linear_conv_kernel_dim"],
            mtp_layers=t.get("mtp_num_hidden_layers", 0),
            group=q.get("group_size") or 128,
        )


#: Qwen3.6-27B's text shape: Qwen3.5-27B's published config.json, which Qwen3.6-27B shares
#: (lab/checkpoint.py writes the same values and says what is NOT VERIFIED about them).
QWEN36_27B = Shape(
    name="qwen3.6-27b",
    vocab=248320,
    hidden=5120,
    intermediate=17408,
    num_layers=64,
    full_attention_interval=4,
    heads=24,
    kv_heads=4,
    head_dim=256,
    partial_rotary=0.25,
    mrope_section=(11, 11, 10),
    lin_k_heads=16,
    lin_v_heads=48,
    lin_k_dim=128,
    lin_v_dim=128,
    conv_k=4,
    mtp_layers=1,
    group=128,
)
