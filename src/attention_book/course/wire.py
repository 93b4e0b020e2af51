"""Values between the grader and a submission's sandbox as JSON: numbers, strings, lists, dicts, tensors
and arrays, never pickles (course tooling; see `attention_book.course`).

A tensor or array travels as {"tensor"|"array": dtype, "shape": [...], "data": nested lists}; a dict as
{"dict": [[key, value], ...]} so that its keys keep their types; a tuple as {"tuple": [...]}. Decoding
accepts only these forms and only the dtypes below, so a submission can send data and nothing else.
"""

import json
import math

import numpy as np
import torch

DTYPES = {"float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"}
MAX_DEPTH = 32
PRELOADABLE = ("tensorflow", "keras")  # what the grader may ask the sandbox's worker to import before it forks


def encode(value):
    """A JSON-ready form of `value` (see the module docstring); TypeError for anything else."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return encode(value.item())
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        kind, dtype = "tensor", str(value.dtype).removeprefix("torch.")
        data = value.float().tolist() if dtype in ("float16", "bfloat16") else value.tolist()
    elif isinstance(value, np.ndarray):
        kind, dtype, data = "array", str(value.dtype), value.tolist()
    elif isinstance(value, (list, tuple)):
        items = [encode(v) for v in value]
        return items if isinstance(value, list) else {"tuple": items}
    elif isinstance(value, dict):
        return {"dict": [[encode(k), encode(v)] for k, v in value.items()]}
    else:
        raise TypeError(f"cannot send a {type(value).__name__}: return numbers, strings, lists, dicts, tensors or arrays")
    if dtype not in DTYPES:
        raise TypeError(f"cannot send a {kind} of dtype {dtype}")
    return {kind: dtype, "shape": list(value.shape), "data": _finite(data)}


def _finite(data):
    """Nested lists with inf and nan spelled as strings (JSON has no such numbers)."""
    if isinstance(data, list):
        return [_finite(d) for d in data]
    return data if not isinstance(data, float) or math.isfinite(data) else repr(data)


def _number(data):
    if isinstance(data, list):
        return [_number(d) for d in data]
    if isinstance(data, str):
        if data not in ("inf", "-inf", "nan"):
            raise ValueError(f"not a number: {data[:20]!r}")
        return float(data)
    if not isinstance(data, (bool, int, float)):
        raise ValueError(f"not a number: {type(data).__name__}")
    return data


def decode(value, depth: int = 0):
    """The value that `encode` produced `value` from; ValueError for any other form."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [decode(v, depth + 1) for v in value]
    if not isinstance(value, dict) or len(value) not in (1, 3):
        raise ValueError(f"unexpected value {str(value)[:60]}")
    if set(value) == {"float"}:
        return float(_number(value["float"]))
    if set(value) == {"tuple"} and isinstance(value["tuple"], list):
        return tuple(decode(v, depth + 1) for v in value["tuple"])
    if set(value) == {"dict"} and isinstance(value["dict"], list):
        pairs = [decode(p, depth + 1) for p in value["dict"]]
        if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise ValueError("a dict must be a list of [key, value] pairs")
        try:
            return {k: v for k, v in pairs}
        except TypeError as error:
            raise ValueError(f"a dict key cannot be used: {error}") from None
    kind = next((k for k in ("tensor", "array") if k in value), None)
    if kind is None or set(value) != {kind, "shape", "data"} or value[kind] not in DTYPES:
        raise ValueError(f"unexpected value {str(value)[:60]}")
    shape = value["shape"]
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise ValueError(f"bad shape {str(shape)[:60]}")
    data = _number(value["data"])
    if 0 in shape:  # nested lists cannot carry the shape of an empty array
        data = np.zeros(shape, dtype=np.float32 if value[kind] == "bfloat16" else value[kind])
        return data if kind == "array" else torch.from_numpy(data).to(getattr(torch, value[kind]))
    if kind == "array":
        array = np.array(data, dtype=value[kind])
        if list(array.shape) != shape:
            raise ValueError(f"data of shape {list(array.shape)} sent as shape {shape}")
        return array
    dtype = getattr(torch, value[kind])
    tensor = torch.tensor(data, dtype=torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype).to(dtype)
    if list(tensor.shape) != shape:
        raise ValueError(f"data of shape {list(tensor.shape)} sent as shape {shape}")
    return tensor


def dumps(value) -> str:
    """One line of JSON for `value`."""
    return json.dumps(encode(value), allow_nan=False)


def loads(line: str):
    """The value of one line written by `dumps`."""
    return decode(json.loads(line))
