"""Helpers for the book *Attention from scratch*; each names the chapter that teaches it."""

from .attention import (  # chapter 2
    apply_mask,
    attention_weights,
    check_attention_inputs,
    masked_softmax,
    scaled_dot_product_attention,
)
from .causal import CausalSelfAttention, causal_mask  # chapter 5
from .modules import SelfAttention  # chapter 2
from .multihead import (  # chapter 3
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    mask_from_torch,
    stacked_multihead_attention,
)
from .tokens import SENTENCE, build_vocab, encode, words  # chapter 1

__all__ = [
    "SENTENCE",
    "CausalSelfAttention",
    "MultiHeadAttention",
    "MultiHeadAttentionWrapper",
    "SelfAttention",
    "apply_mask",
    "attention_weights",
    "build_vocab",
    "causal_mask",
    "check_attention_inputs",
    "encode",
    "mask_from_torch",
    "masked_softmax",
    "scaled_dot_product_attention",
    "stacked_multihead_attention",
    "words",
]
__version__ = "0.1.0"
