"""Helpers for the book *Attention from scratch*; each names the chapter that teaches it.

The rule for what this top level exports: exactly the names the chapters call as `ab.<name>` after
`import attention_book as ab`, the core of chapters 1-5, one name per idea. Everything else is imported
from the module named after its subject, in the chapters' order: `tokens` (1), `attention`,
`self_attention` and `scaling` (2), `multihead` (3, 4), `causal` (5), `keras_decoder` (6), `kv_cache` and
`decoder` (7), `efficient` and `triton_attention` (8), `positions` and `induction` (9); figures from
`plotting`, measurement from `measure`, exercise feedback and course tooling from `course` (its command:
`python -m attention_book.course`).
"""

from .attention import scaled_dot_product_attention  # chapter 2
from .causal import CausalSelfAttention, causal_mask  # chapter 5
from .multihead import (  # chapter 3
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    mask_from_torch,
    stacked_multihead_attention,
)
from .self_attention import SelfAttention  # chapter 2
from .tokens import SENTENCE, build_vocab, encode, words  # chapter 1

__all__ = [
    "SENTENCE",
    "CausalSelfAttention",
    "MultiHeadAttention",
    "MultiHeadAttentionWrapper",
    "SelfAttention",
    "build_vocab",
    "causal_mask",
    "encode",
    "mask_from_torch",
    "scaled_dot_product_attention",
    "stacked_multihead_attention",
    "words",
]
__version__ = "0.1.0"
