"""Helpers for the book *Attention from scratch*; each names the chapter that teaches it."""

from .attention import (
    apply_mask,
    attention_weights,
    check_attention_inputs,
    masked_softmax,
    scaled_dot_product_attention,
)
from .modules import SelfAttention
from .tokens import SENTENCE, build_vocab, encode, words

__all__ = [
    "SENTENCE",
    "SelfAttention",
    "apply_mask",
    "attention_weights",
    "build_vocab",
    "check_attention_inputs",
    "encode",
    "masked_softmax",
    "scaled_dot_product_attention",
    "words",
]
__version__ = "0.1.0"

from .multihead import (  # noqa: E402  (chapter 3)
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    mask_from_torch,
    stacked_multihead_attention,
)

__all__ += ["MultiHeadAttention", "MultiHeadAttentionWrapper", "mask_from_torch", "stacked_multihead_attention"]

from .causal import CausalSelfAttention, causal_mask  # noqa: E402  (chapter 5)

__all__ += ["CausalSelfAttention", "causal_mask"]
