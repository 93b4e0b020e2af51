"""The small Keras decoder of chapter 6: its saved weights, its forward pass by hand, and a PyTorch port.

Only `build_keras_decoder` needs TensorFlow; reading the weights and the hand-written forward pass need
NumPy and h5py, and the port needs PyTorch.
"""

from dataclasses import dataclass
from importlib.resources import files

import numpy as np
import torch
from torch import nn

from .causal import causal_mask
from .kv_cache import Int8KVCache, KVCache
from .multihead import MultiHeadAttention, copy_parameters, keras_attention_map


VOCAB = {0: "<pad>", 1: "今", 2: "天", 3: "气", 4: "好", 5: "真"}  # chapter 6's characters; 0 pads
PINYIN = {0: "<pad>", 1: "jin", 2: "tian", 3: "qi", 4: "hao", 5: "zhen"}  # figure labels: no CJK font needed
SENTENCE_TOKENS = [1, 2, 2, 3, 5, 4]  # 今天天气真好, "the weather is really nice today"


@dataclass(frozen=True)
class KerasDecoderConfig:
    """Sizes of chapter 6's decoder: Embedding(V, E) -> MultiHeadAttention(H, key_dim) -> Dense(V, softmax)."""

    vocab_size: int = 6  # 5 characters of "今天天气真好" and 0 for padding
    embed_dim: int = 64  # E
    num_heads: int = 2  # H
    key_dim: int = 64  # d_k per head; here H · d_k = 128 != E


def keras_weight_map(config: KerasDecoderConfig) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Our tensor names -> (dataset path in a Keras 3 `.weights.h5` file, expected shape) (chapter 6)."""
    V, E, H, K = config.vocab_size, config.embed_dim, config.num_heads, config.key_dim
    mha = "layers/multi_head_attention"
    return {
        "embedding": ("layers/embedding/vars/0", (V, E)),
        "query_kernel": (f"{mha}/query_dense/vars/0", (E, H, K)),
        "query_bias": (f"{mha}/query_dense/vars/1", (H, K)),
        "key_kernel": (f"{mha}/key_dense/vars/0", (E, H, K)),
        "key_bias": (f"{mha}/key_dense/vars/1", (H, K)),
        "value_kernel": (f"{mha}/value_dense/vars/0", (E, H, K)),
        "value_bias": (f"{mha}/value_dense/vars/1", (H, K)),
        "output_kernel": (f"{mha}/output_dense/vars/0", (H, K, E)),
        "output_bias": (f"{mha}/output_dense/vars/1", (E,)),
        "dense_kernel": ("layers/dense/vars/0", (E, V)),
        "dense_bias": ("layers/dense/vars/1", (V,)),
    }


class MissingDatasetError(KeyError):
    """A dataset the name map needs is not in the weight file; the message lists those that are."""

    def __str__(self) -> str:
        return self.args[0]  # KeyError would print the repr of the message, quotes and escaped newlines


def h5_datasets(path) -> dict[str, tuple[int, ...]]:
    """Every dataset in an HDF5 file, path -> shape (chapter 6)."""
    import h5py

    found = {}
    with h5py.File(path, "r") as file:
        file.visititems(lambda name, obj: found.update({name: obj.shape}) if isinstance(obj, h5py.Dataset) else None)
    return found


def read_keras_weights(path, config: KerasDecoderConfig = KerasDecoderConfig()) -> dict[str, np.ndarray]:
    """The decoder's tensors from a `.weights.h5` file, by the explicit name map, every shape checked (chapter 6)."""
    import h5py

    weights = {}
    with h5py.File(path, "r") as file:
        for name, (dataset, shape) in keras_weight_map(config).items():
            if dataset not in file:
                present = "\n  ".join(f"{p} {s}" for p, s in h5_datasets(path).items())
                raise MissingDatasetError(f"{name}: no dataset {dataset!r}\n  in {path}, which has:\n  {present}")
            array = file[dataset][()]
            if array.shape != shape:
                raise ValueError(f"{name}: expected shape {shape}, the file has {array.shape}\n"
                                 f"  dataset {dataset!r}\n  in {path}")
            weights[name] = array
    return weights


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax along `axis`, shifted by the maximum so that exp never overflows."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def project(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Keras's per-head projection: x (B, T, E) · kernel (E, H, d_k) + bias (H, d_k) -> (B, H, T, d_k)."""
    return np.einsum("bte,ehk->bhtk", x, kernel) + bias[:, None, :]


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal attention of q (B, H, T, d_k) over k, v (B, H, S, d_k), the queries being the last T positions."""
    T, S, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    scores = np.einsum("bhtk,bhsk->bhts", q, k) / np.sqrt(d_k)  # (B, H, T, S)
    allowed = causal_mask(T, S).numpy()  # (T, S), lower-triangular, bottom-right aligned (chapter 5)
    weights = softmax(np.where(allowed, scores, -np.inf))  # (B, H, T, S)
    return np.einsum("bhts,bhsk->bhtk", weights, v)  # (B, H, T, d_k)


def decoder_forward(weights: dict[str, np.ndarray], tokens: np.ndarray,
                    cache=None) -> np.ndarray:
    """The Keras decoder's forward pass with einsum on its saved arrays:
    tokens (B, T) -> next-token probabilities (B, T, V) (chapter 6).

    With a `KVCache` (chapter 7) `tokens` are the newest T positions and
    attend to the cached ones too.
    """
    w = weights
    tokens = validate_token_ids(tokens, w["embedding"].shape[0])  # (B, T)
    validate_full_cache(cache)
    x = w["embedding"][tokens]  # gather: (B, T, E)
    q = project(x, w["query_kernel"], w["query_bias"])  # (B, H, T, d_k)
    k = project(x, w["key_kernel"], w["key_bias"])  # (B, H, T, d_k)
    v = project(x, w["value_kernel"], w["value_bias"])  # (B, H, T, d_k)
    if cache is not None:
        k, v = cache.append(k, v)  # every position so far: (B, H, S, d_k)
    context = attend(q, k, v)  # (B, H, T, d_k)
    attended = np.einsum("bhtk,hke->bte", context, w["output_kernel"])
    attended = attended + w["output_bias"]  # (B, T, E)
    logits = attended @ w["dense_kernel"] + w["dense_bias"]  # (B, T, V)
    return softmax(logits)


def build_keras_decoder(config: KerasDecoderConfig = KerasDecoderConfig()):
    """Chapter 6's Keras model, uncompiled:
    tokens (B, T) int -> next-token probabilities (B, T, V)."""
    import keras

    c = config
    tokens = keras.Input(shape=(None,), dtype="int32", name="tokens")
    embedding = keras.layers.Embedding(c.vocab_size, c.embed_dim,
                                       name="embedding")
    attention = keras.layers.MultiHeadAttention(c.num_heads, c.key_dim,
                                                name="attention")
    dense = keras.layers.Dense(c.vocab_size, activation="softmax",
                               name="next_token")
    x = embedding(tokens)  # (B, T, E)
    x = attention(x, x, use_causal_mask=True)  # query = key = value = x
    return keras.Model(tokens, dense(x), name="decoder")


def train_keras_decoder(inputs, targets, epochs: int = 164, seed: int = 42,
                        config: KerasDecoderConfig = KerasDecoderConfig()):
    """Chapter 6's decoder trained with Adam on one teacher-forced
    sentence; returns (model, loss per epoch).

    Seeded, with TensorFlow's deterministic ops: runs agree on one machine
    and one version. Other Keras versions draw other initial weights from
    the same seed and reach an equivalent model (chapter 6).
    """
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)  # Python, NumPy and TensorFlow
    tf.config.experimental.enable_op_determinism()
    model = build_keras_decoder(config)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    losses = []
    for _ in range(epochs):  # one batch = one epoch
        # Keras 3 before keras-team/keras#22617 (April 2026) returns the
        # mean loss of all batches so far; later releases reset by themselves
        model.reset_metrics()
        losses.append(float(model.train_on_batch(inputs, targets)))
    return model, losses


# Chapter 6's decoder as trained once by `scripts/train_keras_decoder.py` (seed 42, the pinned versions of
# requirements.txt): the chapters compute from these arrays, so that their numbers do not depend on how a
# reader's TensorFlow and Keras initialise and train. A fresh training reaches an equivalent model.
TRAINED_WEIGHTS = "keras_decoder.weights.h5"
TRAINED_FINAL_LOSS_BELOW = 0.01  # the stored model's training loss, and what a fresh training must reach


def trained_weights_path():
    """Where the package keeps chapter 6's trained weights, a Keras 3 `.weights.h5` file (chapter 6)."""
    return files("attention_book") / "data" / TRAINED_WEIGHTS


def load_trained_weights(config: KerasDecoderConfig = KerasDecoderConfig()) -> dict[str, np.ndarray]:
    """Chapter 6's trained decoder as named arrays, read from the package by `read_keras_weights` (chapters 6, 7)."""
    return read_keras_weights(trained_weights_path(), config)


def keras_decoder_from_weights(weights: dict[str, np.ndarray], config: KerasDecoderConfig = KerasDecoderConfig()):
    """Chapter 6's Keras model holding the given arrays (as `read_keras_weights` returns them), on any Keras 3.

    The arrays are assigned layer by layer in the name map's order, not with `load_weights`, whose file layout
    changed between Keras releases; Keras checks every shape.
    """
    model = build_keras_decoder(config)
    names = list(keras_weight_map(config))  # embedding, 8 attention arrays, dense kernel and bias
    model.get_layer("embedding").set_weights([weights[n] for n in names[:1]])
    model.get_layer("attention").set_weights([weights[n] for n in names[1:9]])
    model.get_layer("next_token").set_weights([weights[n] for n in names[9:]])
    return model


class TorchKerasDecoder(nn.Module):
    """Chapter 6's decoder in PyTorch, on chapter 3's `MultiHeadAttention` with head_dim = key_dim.

    tokens (B, T) -> next-token probabilities (B, T, V).
    """

    def __init__(self, config: KerasDecoderConfig = KerasDecoderConfig()):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.embed_dim)
        self.attention = MultiHeadAttention(config.embed_dim, config.num_heads, head_dim=config.key_dim)
        self.dense = nn.Linear(config.embed_dim, config.vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)  # (B, T, E)
        mask = causal_mask(tokens.shape[-1], device=tokens.device)[None, None]  # (1, 1, T, T): never read as (B, S)
        attended, _ = self.attention(x, mask=mask, need_weights=False)  # (B, T, E)
        return torch.softmax(self.dense(attended), dim=-1)  # (B, T, V)

    @classmethod
    def from_keras(cls, weights: dict[str, np.ndarray], config: KerasDecoderConfig = KerasDecoderConfig()):
        """A port of arrays read by `read_keras_weights`, copied by `torch_from_keras_map` with shape checks."""
        module = cls(config)
        copy_parameters(module, torch_from_keras_map(weights), "the Keras arrays give")
        return module


def torch_from_keras_map(w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Our PyTorch parameter names -> the Keras arrays rearranged for them
    (chapter 6). The attention's kernels keep a head axis in Keras;
    chapter 3's `keras_attention_map` flattens them.
    """
    attention = {f"attention.{name}": array
                 for name, array in keras_attention_map(w).items()}
    return {
        "embedding.weight": w["embedding"],  # (V, E)
        **attention,
        "dense.weight": w["dense_kernel"].T,  # (E, V) -> (V, E)
        "dense.bias": w["dense_bias"],  # (V,)
    }


def validate_token_ids(tokens, vocab_size: int) -> np.ndarray:
    """Token ids (B, T) as a NumPy array of integers from 0 to vocab_size − 1 (chapter 6)."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens must be integer ids (B, T), got shape {tokens.shape} of {tokens.dtype}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"tokens must be ids from 0 to {vocab_size - 1} (the embedding's rows), got values from "
                         f"{tokens.min()} to {tokens.max()}: NumPy would read -1 as the last row")
    return tokens


def validate_full_cache(cache) -> None:
    """None, or a `KVCache` that keeps every position: this decoder has no window, so a ring (which
    forgets) or a paged cache (whose positions differ per sequence) would change what it computes."""
    if cache is not None and (not isinstance(cache, KVCache) or isinstance(cache, Int8KVCache)):
        raise ValueError(f"cache must be a KVCache (chapter 7), got {type(cache).__name__}: chapter 6's decoder "
                         "attends to every earlier position, so a cache must keep them all as they are")
