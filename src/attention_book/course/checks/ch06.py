"""Checks of chapter 6's graded exercises (the TensorFlow decoder); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import io

import numpy as np

from ...keras_decoder import (
    KerasDecoderConfig,
    attend,
    decoder_forward,
    keras_weight_map,
    project,
    softmax,
)
from .common import TENSORFLOW, CASES, Check, shape_problem

OPTIMIZER_NOISE = {"optimizer/vars/0": np.array(3.0), "optimizer/vars/1": np.array(0.001)}
KERAS_NAMES = {  # group -> its `name` attribute, as `build_keras_decoder`'s model writes them (tests check)
    "vars": "decoder",
    "layers/input_layer/vars": "tokens",
    "layers/embedding/vars": "embedding",
    "layers/multi_head_attention/vars": "attention",
    "layers/multi_head_attention/query_dense/vars": "query",
    "layers/multi_head_attention/key_dense/vars": "key",
    "layers/multi_head_attention/value_dense/vars": "value",
    "layers/multi_head_attention/output_dense/vars": "attention_output",
    "layers/multi_head_attention/_softmax/vars": "softmax",
    "layers/multi_head_attention/_dropout_layer/vars": "dropout",
    "layers/dense/vars": "next_token",
    "optimizer/vars": "adam",
}


def random_decoder(rng, config: KerasDecoderConfig):
    """Random arrays for the chapter's decoder: (our names -> arrays, h5 dataset paths -> arrays)."""
    named, datasets = {}, dict(OPTIMIZER_NOISE)
    for name, (path, shape) in keras_weight_map(config).items():
        named[name] = datasets[path] = rng.normal(size=shape)
    return named, datasets


def random_config(rng) -> KerasDecoderConfig:
    V, E, H, K = (int(n) for n in rng.integers(2, 6, size=4))
    return KerasDecoderConfig(vocab_size=V, embed_dim=E, num_heads=H, key_dim=K)


def attention_layer(w: dict, x: np.ndarray, causal: bool = True, scaled: bool = True) -> np.ndarray:
    """One Keras MultiHeadAttention on x (B, T, E) from our named arrays; `causal` and `scaled` off
    reproduce the usual mistakes."""
    q = project(x, w["query_kernel"], w["query_bias"])  # (B, H, T, d_k)
    k = project(x, w["key_kernel"], w["key_bias"])
    v = project(x, w["value_kernel"], w["value_bias"])
    if causal and scaled:
        context = attend(q, k, v)
    else:
        scores = np.einsum("bhtk,bhsk->bhts", q, k) / (np.sqrt(q.shape[-1]) if scaled else 1.0)
        if causal:
            T = scores.shape[-1]
            scores = np.where(np.tril(np.ones((T, T))) == 1, scores, -np.inf)
        context = np.einsum("bhts,bhsk->bhtk", softmax(scores), v)
    return np.einsum("bhtk,hke->bte", context, w["output_kernel"]) + w["output_bias"]  # (B, T, E)


def read_out(w: dict, x: np.ndarray) -> np.ndarray:
    return softmax(x @ w["dense_kernel"] + w["dense_bias"])  # (B, T, V)


def port_problem(name: str, got: np.ndarray, w: dict, expected: np.ndarray) -> str:
    """What is wrong with the array `got` given for the PyTorch parameter `name`, diagnosed."""
    kernels = {"q_proj": "query_kernel", "k_proj": "key_kernel", "v_proj": "value_kernel"}
    layer = name.split(".")[-2]
    if name.endswith("weight") and got.shape == expected.shape[::-1] and np.allclose(got, expected.T):
        return f"{name} is not transposed: nn.Linear stores its weight as (out, in)"
    if layer in kernels and name.endswith("weight"):
        kernel = w[kernels[layer]]  # (E, H, d_k)
        by_feature = kernel.transpose(0, 2, 1).reshape(kernel.shape[0], -1).T  # heads interleaved
        if got.shape == by_feature.shape and np.allclose(got, by_feature):
            return f"{name}: the heads are interleaved; flatten (E, H, d_k) as it is, so that head 0's d_k " \
                   "columns come first, as split_heads cuts them"
    if layer == "out_proj" and name.endswith("weight"):
        kernel = w["output_kernel"]  # (H, d_k, E)
        by_feature = kernel.transpose(1, 0, 2).reshape(-1, kernel.shape[-1]).T
        if got.shape == by_feature.shape and np.allclose(got, by_feature):
            return f"{name}: the heads are interleaved; flatten (H, d_k, E) to (H·d_k, E) as it is, then transpose"
    return f"{name} holds other values than the Keras arrays give it"


def check_torch_port(torch_state_by_hand, seed: int = 0) -> str | None:
    """Chapter 6: the decoder's named Keras arrays -> {PyTorch parameter name: array} for
    `TorchKerasDecoder`; loaded into the module, it must give the Keras decoder's probabilities."""
    import torch

    from ...keras_decoder import TorchKerasDecoder, torch_from_keras_map

    rng = np.random.default_rng([seed, 61])
    for _ in range(CASES):
        config = random_config(rng)
        named, _ = random_decoder(rng, config)
        module = TorchKerasDecoder(config)
        shapes = {name: tuple(t.shape) for name, t in module.state_dict().items()}
        got = torch_state_by_hand({name: array.copy() for name, array in named.items()})
        if not isinstance(got, dict):
            return f"return a dict {{PyTorch parameter name: array}}, not {type(got).__name__}"
        if missing := [name for name in shapes if name not in got]:
            return f"no array for {missing[0]}; TorchKerasDecoder's parameters are {', '.join(shapes)}"
        if extra := [name for name in got if name not in shapes]:
            return f"{extra[0]} is not a parameter of TorchKerasDecoder ({', '.join(shapes)})"
        sizes = f"with E={config.embed_dim}, H={config.num_heads}, d_k={config.key_dim}, V={config.vocab_size}"
        got = {name: np.asarray(array, dtype=np.float64) for name, array in got.items()}
        reference = torch_from_keras_map(named)
        for name, shape in shapes.items():
            if got[name].shape != shape:
                if got[name].shape == shape[::-1]:
                    return f"{sizes}: {name} has shape {got[name].shape}, the module holds {shape}: " \
                           "nn.Linear stores its weight as (out, in)"
                return f"{sizes}: {name} has shape {got[name].shape}, the module holds {shape}"
        module.load_state_dict({name: torch.as_tensor(array, dtype=torch.float32) for name, array in got.items()})
        B, T = (int(n) for n in rng.integers(1, 5, size=2))
        tokens = rng.integers(0, config.vocab_size, size=(B, T))
        with torch.no_grad():
            probabilities = module(torch.from_numpy(tokens)).double().numpy()  # (B, T, V)
        if np.allclose(probabilities, decoder_forward(named, tokens), atol=1e-5):
            continue
        for name in shapes:
            if not np.allclose(got[name], reference[name], atol=1e-6):
                return f"{sizes}: {port_problem(name, got[name], named, reference[name])}"
        return f"{sizes}: the loaded module's probabilities differ from the Keras decoder's"
    return None


KERAS_LARGE_NEGATIVE = -0.7 * 3.38953e38  # what Keras's fused path writes for a masked score


def padded_reference(w: dict, tokens: np.ndarray, key_mask: bool = True, query_mask: bool = True) -> np.ndarray:
    """The decoder as Keras runs it with Embedding(mask_zero=True), id 0 padding: query i sees key j when
    j <= i and both ids are not 0; a query that sees nothing gets uniform weights (the fused path).
    `key_mask` and `query_mask` off reproduce the usual mistakes."""
    x = w["embedding"][tokens]  # (B, T, E)
    q, k, v = (project(x, w[f"{n}_kernel"], w[f"{n}_bias"]) for n in ("query", "key", "value"))  # (B, H, T, d_k)
    T = tokens.shape[1]
    real = tokens != 0  # (B, T)
    allowed = np.tril(np.ones((T, T), dtype=bool))[None]  # (1, T, T)
    if key_mask:
        allowed = allowed & real[:, None, :]
    if query_mask:
        allowed = allowed & real[:, :, None]  # (B, T, T)
    scores = np.einsum("bhtk,bhsk->bhts", q, k) / np.sqrt(q.shape[-1])
    scores = np.where(allowed[:, None], scores, KERAS_LARGE_NEGATIVE)  # (B, H, T, T)
    context = np.einsum("bhts,bhsk->bhtk", softmax(scores), v)
    return read_out(w, np.einsum("bhtk,hke->bte", context, w["output_kernel"]) + w["output_bias"])


def padded_tokens(rng, vocab_size: int) -> np.ndarray:
    """A batch (B, T) with right padding, left padding and an all-padding row (id 0)."""
    B, T = 4, int(rng.integers(3, 7))
    tokens = rng.integers(1, vocab_size, size=(B, T))
    n = int(rng.integers(1, T))
    tokens[0, T - n:] = 0  # right padding
    tokens[1, :n] = 0  # left padding
    tokens[2] = 0  # nothing but padding
    return tokens


def check_padded(padded_forward, seed: int = 0) -> str | None:
    """Chapter 6: the decoder's arrays {name: array} and ids (B, T) with padding id 0 -> the probabilities
    (B, T, V) that Keras gives with Embedding(mask_zero=True), checked against the reference above (which
    matches Keras 3.15 to float32 rounding)."""
    rng = np.random.default_rng([seed, 16])
    for _ in range(CASES):
        config = random_config(rng)
        named, _ = random_decoder(rng, config)
        tokens = padded_tokens(rng, config.vocab_size)
        expected = padded_reference(named, tokens)
        got = np.asarray(padded_forward(dict(named), tokens.copy()))
        if problem := shape_problem(got, expected.shape, "the probabilities"):
            return problem + " (B, T, V)"
        if np.allclose(got, expected, atol=1e-6):
            continue
        real = tokens != 0
        if np.allclose(got, padded_reference(named, tokens, key_mask=False), atol=1e-6) or np.allclose(
                got, decoder_forward(named, tokens), atol=1e-6):
            return f"ids {tokens[1].tolist()} (left padding): the real tokens read the padding keys; " \
                   "mask_zero=True masks every key whose id is 0"
        if np.allclose(got[real], expected[real], atol=1e-6):
            return f"the real positions are right, the padding ones not (ids {tokens[0].tolist()}): Keras " \
                   "masks the query side too, so a padding query sees no key, and the fused path gives it " \
                   "uniform weights over all T keys"
        wrong = np.argwhere(~np.isclose(got, expected, atol=1e-6))[0]
        return f"ids {tokens[wrong[0]].tolist()}: probabilities{list(int(i) for i in wrong)} are " \
               f"{got[tuple(wrong)]:.4f}, expected {expected[tuple(wrong)]:.4f}"
    return None


TWO_LAYER = "layers/multi_head_attention_1"


def residual(w: dict, x: np.ndarray) -> np.ndarray:
    """x + one causal MultiHeadAttention of x: a residual connection around the layer, (B, T, E)."""
    return x + attention_layer(w, x)


def check_two_layers(two_layer_forward, seed: int = 0) -> str | None:
    """Chapter 6: a model Embedding -> x + MultiHeadAttention(x) -> x + MultiHeadAttention(x) ->
    Dense(softmax), both attentions causal, from its `.weights.h5` datasets; Keras names the second
    attention's group `multi_head_attention_1`."""
    rng = np.random.default_rng([seed, 26])
    for _ in range(CASES):
        config = random_config(rng)
        first, datasets = random_decoder(rng, config)
        second = {}
        for name, (path, shape) in keras_weight_map(config).items():
            if path.startswith("layers/multi_head_attention/"):
                second[name] = datasets[path.replace("layers/multi_head_attention", TWO_LAYER)] = rng.normal(
                    size=shape)
        B, T = (int(n) for n in rng.integers(1, 4, size=2))
        tokens = rng.integers(0, config.vocab_size, size=(B, T + 1))
        x = first["embedding"][tokens]
        expected = read_out(first, residual(second, residual(first, x)))
        got = np.asarray(two_layer_forward(dict(datasets), tokens.copy()))
        if problem := shape_problem(got, expected.shape, "the probabilities"):
            return problem + " (B, T, V)"
        if np.allclose(got, expected, atol=1e-6):
            continue
        if np.allclose(got, read_out(first, attention_layer(second, attention_layer(first, x))), atol=1e-6):
            return "the residual connections are missing: each attention's output is added to its input"
        if np.allclose(got, read_out(first, residual(first, residual(first, x))), atol=1e-6):
            return f"both attention layers used the arrays of layers/multi_head_attention; the second is " \
                   f"{TWO_LAYER} (Keras numbers a class's second layer _1)"
        if np.allclose(got, read_out(first, residual(second, residual(second, x))), atol=1e-6):
            return f"both attention layers used {TWO_LAYER}; the first is layers/multi_head_attention"
        if np.allclose(got, read_out(first, residual(first, residual(second, x))), atol=1e-6):
            return f"the layers are in the wrong order: {TWO_LAYER} is the second attention, applied after the first"
        wrong = np.argwhere(~np.isclose(got, expected, atol=1e-6))[0]
        return f"probabilities{list(int(i) for i in wrong)} are {got[tuple(wrong)]:.4f}, " \
               f"expected {expected[tuple(wrong)]:.4f}"
    return None


def adam_state(datasets: dict, config: KerasDecoderConfig, iterations: int = 3) -> dict:
    """The `optimizer` datasets an Adam optimizer of the model holding `datasets` writes: the step count
    (int64), the learning rate, then two moment estimates per weight, each shaped like it, in the weights'
    order (vars/2, vars/3 for the embedding, …); here made-up moments, which a reader must skip."""
    state = {"optimizer/vars/0": np.array(iterations, dtype=np.int64), "optimizer/vars/1": np.array(0.001)}
    for i, (path, _) in enumerate(keras_weight_map(config).values()):
        state[f"optimizer/vars/{2 + 2 * i}"] = 0.1 * datasets[path]  # first moment
        state[f"optimizer/vars/{3 + 2 * i}"] = 0.01 * datasets[path] ** 2  # second moment
    return state


def h5_bytes_of(datasets: dict, names: dict | None = None) -> np.ndarray:
    """A `.weights.h5` file holding `datasets` {path: array}, integers in int64 and the rest in float32, and
    the groups `names` {group: its `name` attribute}, as Keras writes them, as bytes (uint8). With the paths
    of `keras_weight_map`, `adam_state` and KERAS_NAMES, it holds what a Keras model writes
    (tests/test_assignments.py). The file is written in HDF5's compact latest format and without
    modification times, so that the same arrays give the same bytes (data/feedback/ stores them)."""
    import h5py

    buffer = io.BytesIO()
    file_creation = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    file_creation.set_obj_track_times(False)  # the root group's times
    access = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    access.set_fileobj_driver(h5py.h5fd.fileobj_driver, buffer)
    access.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    group_creation = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    group_creation.set_obj_track_times(False)
    with h5py.File(h5py.h5f.create(b"weights.h5", h5py.h5f.ACC_TRUNC, fapl=access, fcpl=file_creation)) as file:
        def make_groups(path: str):  # path and every group above it
            parts = path.split("/")
            for group in ("/".join(parts[:i]) for i in range(1, len(parts) + 1)):
                if group not in file:
                    h5py.h5g.create(file.id, group.encode(), gcpl=group_creation)

        for path, array in datasets.items():
            if "/" in path:
                make_groups(path.rsplit("/", 1)[0])
            array = np.asarray(array)
            dtype = np.int64 if np.issubdtype(array.dtype, np.integer) else np.float32
            file.create_dataset(path, data=array.astype(dtype), track_times=False)
        for group, name in (names or {}).items():
            make_groups(group)
            file[group].attrs["name"] = name
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8).copy()


def greedy_reference(w: dict, prompt: np.ndarray, steps: int):
    """Greedy generation with the chapter's pass: (prompt then `steps` tokens (B, T0 + steps), the
    probabilities (B, steps, V) each new token was the argmax of). tests/test_assignments.py checks that the
    Keras model holding the same arrays gives the same (Keras's own greedy loop)."""
    tokens, chosen = prompt, []
    for _ in range(steps):
        p = decoder_forward(w, tokens)[:, -1]  # (B, V): the last position's
        chosen.append(p)
        tokens = np.concatenate([tokens, p.argmax(-1)[:, None]], axis=1)
    return tokens, np.stack(chosen, axis=1)


def clear_choices(probabilities: np.ndarray) -> bool:
    """Every argmax wins by more than rounding, so that float32 and float64 passes choose alike."""
    top = np.sort(probabilities, axis=-1)
    return bool((top[..., -1] - top[..., -2] > 1e-3).all())


def generation_problem(got, w: dict, prompt: np.ndarray, steps: int, what: str) -> str | None:
    """What is wrong with `got` = (tokens, probabilities) for greedy generation from `prompt`."""
    tokens, expected = greedy_reference(w, prompt, steps)
    if not isinstance(got, tuple | list) or len(got) != 2:
        return f"return (tokens, probabilities), two arrays; yours is {type(got).__name__}"
    got_tokens, got_p = np.asarray(got[0]), np.asarray(got[1], dtype=np.float64)
    T0 = prompt.shape[1]
    if got_tokens.shape == (prompt.shape[0], steps) and got_p.shape == expected.shape:
        return f"{what}: tokens should be the prompt followed by the {steps} new tokens, (B, T0 + steps) = " \
               f"{tokens.shape}; yours has only the new ones"
    if problem := shape_problem(got_tokens, tokens.shape, f"{what}: the tokens"):
        return problem + " (B, T0 + steps)"
    if problem := shape_problem(got_p, expected.shape, f"{what}: the probabilities"):
        return problem + " (B, steps, V): the distribution each new token was chosen from"
    if not np.array_equal(got_tokens[:, :T0], prompt):
        return f"{what}: the tokens must start with the prompt {prompt.tolist()}"
    for step in range(steps):
        if not np.allclose(got_p[:, step], expected[:, step], atol=1e-5):
            sequence = tokens[:, : T0 + step]
            first = decoder_forward(w, sequence)[:, 0]  # (B, V): position 0's
            if np.allclose(got_p[:, step], first, atol=1e-5):
                if T0 == 1:  # position 0's distribution is also step 0's: two mistakes look alike
                    return f"{what}, step {step}: you gave step 0's distribution again; each step runs the " \
                           f"model on the prompt and every token chosen so far, {sequence.tolist()}, and " \
                           "reads the next token from the last position"
                return f"{what}, step {step}: these are position 0's probabilities; the next token is read " \
                       "from the last position"
            step_0_right = step > 0 and np.allclose(got_p[:, 0], expected[:, 0], atol=1e-5)
            if step_0_right and T0 > 1:  # step 0 attended over T0 > 1 keys rightly: the loop is wrong
                return f"{what}: step 0 is right, step {step} is not: each step runs the model on the prompt " \
                       f"and every token chosen so far, {sequence.tolist()}"
            wrong = np.argwhere(~np.isclose(got_p[:, step], expected[:, step], atol=1e-5))[0]
            hint = "; step 0 was right, but with a one-token prompt its softmax has one key, of weight 1, so it " \
                   "cannot catch a mistake inside the attention (the 1/√d_k scale, queries against keys): check " \
                   "those, and that each step runs on the prompt and every token chosen so far" if step_0_right else ""
            return f"{what}, step {step} (tokens so far {sequence.tolist()}): probability {list(map(int, wrong))} " \
                   f"is {got_p[:, step][tuple(wrong)]:.4f}, the pass gives {expected[:, step][tuple(wrong)]:.4f}{hint}"
        if not np.array_equal(got_tokens[:, T0 + step], tokens[:, T0 + step]):
            return f"{what}, step {step}: your probabilities are right, but you appended " \
                   f"{got_tokens[:, T0 + step].tolist()}; greedy appends the most probable token of each row, " \
                   f"{tokens[:, T0 + step].tolist()}"
    return None


def random_generation_case(rng):
    """A random decoder whose greedy choices are clear: (config, its arrays {name: float32 array}, its
    datasets {h5 path: array}, with the optimizer's full group (`adam_state`), prompt (B, T0), steps)."""
    while True:
        config = random_config(rng)
        named, _ = random_decoder(rng, config)
        datasets = {path: np.asarray(2 * named[name], dtype=np.float32)
                    for name, (path, _) in keras_weight_map(config).items()}
        datasets.update(adam_state(datasets, config))
        named = {name: datasets[path] for name, (path, _) in keras_weight_map(config).items()}
        B, T0 = (int(n) for n in rng.integers(1, 4, size=2))
        prompt = rng.integers(0, config.vocab_size, size=(B, T0))
        steps = int(rng.integers(1, 5))
        if clear_choices(greedy_reference(named, prompt, steps)[1]):
            return config, named, datasets, prompt, steps


def check_h5_generation(greedy_from_h5, seed: int = 0) -> str | None:
    """Chapter 6: the bytes of a decoder's `.weights.h5` file (uint8), a prompt (B, T0) and a number of steps
    -> (the prompt then `steps` greedy tokens (B, T0 + steps), the probabilities (B, steps, V) each was
    chosen from), on random decoders of random sizes whose files hold what Keras writes: the paths, the
    `name` attributes and the optimizer's group."""
    rng = np.random.default_rng([seed, 64])
    for _ in range(CASES):
        config, named, datasets, prompt, steps = random_generation_case(rng)
        what = f"with V={config.vocab_size}, E={config.embed_dim}, H={config.num_heads}, d_k={config.key_dim}, " \
               f"prompt {prompt.tolist()}"
        got = greedy_from_h5(h5_bytes_of(datasets, KERAS_NAMES), prompt.copy(), steps)
        if problem := generation_problem(got, named, prompt, steps, what):
            return problem
    return None

CHECKS: dict[str, Check] = {
    "ch6.torch_port": Check(check_torch_port, "torch_state_by_hand",
          forbidden=("attention_book.keras_decoder.torch_from_keras_map", "attention_book.multihead.keras_attention_map",
                     "attention_book.keras_decoder.TorchKerasDecoder.from_keras"),
          imports=TENSORFLOW),
    "ch6.padded": Check(check_padded, "padded_forward",
          forbidden=("attention_book.keras_decoder.decoder_forward", "attention_book.keras_decoder.attend"),
          imports=TENSORFLOW),
    "ch6.two_layers": Check(check_two_layers, "two_layer_forward",
          forbidden=("attention_book.keras_decoder.decoder_forward", "attention_book.keras_decoder.attend"),
          imports=TENSORFLOW),
    "ch6.h5_generation": Check(check_h5_generation, "greedy_from_h5",
          forbidden=("attention_book.keras_decoder.decoder_forward", "attention_book.keras_decoder.read_keras_weights",
                     "attention_book.keras_decoder.keras_weight_map",
                     "attention_book.keras_decoder.keras_decoder_from_weights", "keras.Model.load_weights",
                     "keras.Layer.__call__"),
          imports=TENSORFLOW),
}
