"""How the checks see whether an exercise's method was followed (course tooling): a tensor that reports
what is done with it (`spy_tensor`: chapter 1's one-hot product instead of indexing) and watchers, torch
function modes that log what the code does with the tensors they watch (`KeyValueCopies`: chapter 3's
grouped-query attention without copies). Both work in the kernel (the notebook's `check()`) and, for the
grade, in the sandbox's worker: the grader sends which arguments are spied or watched, the worker spies
or watches its own copies of them around the student's call and sends back what it saw, and the check
judges that report (`grading._SandboxCall`).

The report comes from the process the student's code runs in, so it is only as honest as that code lets
it be: a student who writes code against the grader's internals (patches the watcher, pops its mode,
writes an answer of their own) can forge it. Code that merely does the exercise another way cannot hide
from it: a copy made outside torch (numpy) or a mode popped leaves the watcher without the products it
must see, which fails the check as a copy does (`KeyValueCopies.used`)."""

import math
import threading

import torch

from ..attention import broadcast_shape as attention_broadcast_shape

PRODUCTS = {"__matmul__", "__rmatmul__", "matmul", "mm", "bmm", "einsum", "tensordot", "linear", "addmm", "mv"}


def spy_tensor(tensor: torch.Tensor, log: list, flagged: set):
    """`tensor` as one that logs, in `log`, what is done to it or to what is computed from it before a matrix
    product: ("flagged", name) for an operation named in `flagged`, ("product", name) for a product that uses
    it (chapter 1's one-hot embedding, chapter 3's grouped-query attention without copies)."""

    class Spy(torch.Tensor):
        raw = True  # computed from the tensor without a product in between

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            given = [*args, *kwargs.values()]
            given += [item for a in given if isinstance(a, (list, tuple)) for item in a]  # torch.cat([k, k])
            spies = [a for a in given if isinstance(a, Spy)]
            raw = any(spy.raw for spy in spies)
            name = getattr(func, "__name__", "")
            if raw and name in flagged:
                log.append(("flagged", name))
            if raw and name in PRODUCTS:
                log.append(("product", name))
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **kwargs)
            if isinstance(out, torch.Tensor) and not isinstance(out, torch.nn.Parameter):
                out = out.as_subclass(Spy)
                out.raw = raw and name not in PRODUCTS
            return out

    Spy.spy_log, Spy.spy_flagged = log, frozenset(flagged)  # what the grader sends to the sandbox, reads back
    spy = tensor.as_subclass(Spy)
    spy.raw = True
    return spy


def spied(value) -> bool:
    """Whether `value` is a tensor made by `spy_tensor`."""
    return isinstance(value, torch.Tensor) and isinstance(getattr(type(value), "spy_flagged", None), frozenset)


def plain(value):
    """A spy's data as a plain tensor (to send to the sandbox), anything else as it is."""
    if not spied(value):
        return value
    with torch._C.DisableTorchFunctionSubclass():
        return value.as_subclass(torch.Tensor)


def broadcast_shape(*shapes) -> tuple[int, ...]:
    """The shape `shapes` broadcast to (NumPy's rule), by the package's plain-Python `attention.broadcast_shape`:
    `torch.broadcast_shapes` imports torch.fx's symbolic shapes on its first call, half a minute inside the
    grader's import guard. ValueError if they do not broadcast."""
    shape = attention_broadcast_shape(*shapes)
    if shape is None:
        raise ValueError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
    return shape


class KeyValueCopies:
    """While active (a torch function mode: every torch function, tensor method and operator the code calls),
    logs each call that materialises the given keys and values, or a tensor computed from them alone, at a
    larger size than the memory it was made from: a shared head copied into its group (`repeat_interleave`,
    `repeat`, `cat`, an `expand` made contiguous by `reshape`), or `torch.matmul` (`@`) given keys or values
    whose batch axes it must broadcast, which it does by materialising the expanded operand before its
    batched product. Views (`expand`, `[:, :, None]`, a transpose) copy nothing and are not logged; what a
    call computes from the keys or values together with another tensor (a product with the queries or the
    weights: the scores, the context) is no longer the keys or values, and `used` records which of the
    given tensors (by position) reached such a call: an answer computed from them with nothing in `used`
    was computed out of the watcher's sight; `reads` adds up how much of each given tensor those calls read
    (a slice counts its share: a loop over the heads reads shared latents once per head, a loop over the
    batch once in all, a folded product once). (A dispatch mode would see matmul's copy itself, but it
    imports torch._dynamo, which aborts a process that has loaded TensorFlow.) Chapter 3's ch3.mqa; in the
    grader's sandbox by `watch` (`WATCHERS["copies"]`)."""

    name = "copies"
    _MATMULS = {"matmul", "__matmul__", "__rmatmul__"}
    _PRODUCTS = _MATMULS | {"mm", "bmm", "addmm", "baddbmm", "addbmm", "mv", "dot", "vdot", "einsum",
                            "tensordot", "linear"}
    MAX_COPIES = 100  # entries a report carries at most

    def __init__(self, *tensors: torch.Tensor):
        from torch.overrides import TorchFunctionMode

        outer = self
        self.given = tensors  # what the grader matches with the call's arguments (`watching`)
        self.kept = list(tensors)  # alive while logging, so that no other tensor reuses their memory
        # memory -> (its size, the positions of the given tensors it was made from)
        self.elements = {t.untyped_storage().data_ptr(): (t.numel(), frozenset({i})) for i, t in enumerate(tensors)}
        self.copies: list[tuple[str, tuple[int, ...], int]] = []  # (the call, the copy's shape, source size)
        self.used: set[int] = set()  # the given tensors that met another tensor in a call (a product)
        self.reads: dict[int, float] = {}  # given tensor -> how many times such calls read it whole

        class Calls(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                name = getattr(func, "__name__", str(func))
                outer.look(name, [*args, *kwargs.values()], out)
                return out

        self.mode = Calls()

    def source(self, tensor) -> tuple[int, frozenset] | None:
        """(The size of the key/value memory `tensor` was made from, which given tensors it came from), or
        None if it was not made from them."""
        if isinstance(tensor, torch.Tensor):
            return self.elements.get(tensor.untyped_storage().data_ptr())
        return None

    def look(self, name: str, given: list, out) -> None:
        given = given + [item for a in given if isinstance(a, (list, tuple)) for item in a]  # torch.cat([k, k])
        tensors = [a for a in given if isinstance(a, torch.Tensor)]
        found_in = [(a, found) for a in tensors if (found := self.source(a)) is not None]  # (tensor, its source)
        if not found_in:
            return
        sources = [found for _, found in found_in]
        if name in self._MATMULS and len(tensors) == 2 and min(t.dim() for t in tensors) >= 3:
            batch = broadcast_shape(*(t.shape[:-2] for t in tensors))
            for t, found in found_in:
                if t.shape[:-2] != batch:
                    self.copies.append((name, (*batch, *t.shape[-2:]), found[0]))
        watched_ids = {id(a) for a, _ in found_in}
        others = [a for a in tensors if id(a) not in watched_ids and a.is_floating_point() and a.numel() > 1]
        origins = frozenset().union(*(found[1] for found in sources))
        if others or name in self._PRODUCTS:
            self.used |= origins
            for tensor, found in found_in:  # how much of each given tensor this call read: a slice, part of it
                for origin in found[1]:
                    self.reads[origin] = self.reads.get(origin, 0) + tensor.numel() / max(1, found[0])
            return  # not the keys or values alone: a product with the queries or the weights
        size = max(found[0] for found in sources)
        for made in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(made, torch.Tensor) and self.source(made) is None:  # new memory, from the keys/values
                if made.numel() > size:
                    self.copies.append((name, tuple(made.shape), size))
                self.kept.append(made)
                self.elements[made.untyped_storage().data_ptr()] = (made.numel(), origins)

    def report(self) -> dict:
        """What the watcher saw, as JSON (the worker sends it to the grader)."""
        return {"copies": [[name, list(shape), size] for name, shape, size in self.copies[:self.MAX_COPIES]],
                "used": sorted(self.used), "reads": [[i, n] for i, n in sorted(self.reads.items())]}

    def absorb(self, report) -> None:
        """Add a report from the sandbox's watcher (`report`) to this one's log; ValueError for any other form
        (the worker's answer is the student's process's output)."""
        if not isinstance(report, dict) or set(report) != {"copies", "used", "reads"}:
            raise ValueError("a watcher's report must be {copies, used, reads}")
        copies, used, reads = report["copies"], report["used"], report["reads"]
        if not (isinstance(copies, list) and isinstance(used, list) and isinstance(reads, list)
                and len(copies) <= self.MAX_COPIES):
            raise ValueError("a watcher's report must hold three lists")
        for entry in copies:
            if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                    and isinstance(entry[1], list) and all(_count(n) for n in entry[1]) and _count(entry[2])
                    and entry[2] > 0):
                raise ValueError(f"not a copy: {str(entry)[:60]}")
            self.copies.append((entry[0][:100], tuple(entry[1]), entry[2]))
        if not all(_count(i) and i < len(self.given) for i in used):
            raise ValueError(f"not positions of watched tensors: {str(used)[:60]}")
        self.used |= set(used)
        if len(reads) > len(self.given):
            raise ValueError("a watcher's report has more read counts than watched tensors")
        for entry in reads:
            if not (isinstance(entry, list) and len(entry) == 2 and _count(entry[0]) and entry[0] < len(self.given)
                    and isinstance(entry[1], (int, float)) and not isinstance(entry[1], bool)
                    and math.isfinite(entry[1]) and 0 <= entry[1] < 2**62):
                raise ValueError(f"not a read count: {str(entry)[:60]}")
            self.reads[entry[0]] = self.reads.get(entry[0], 0) + entry[1]

    def __enter__(self):
        self.mode.__enter__()
        _active().append(self)
        return self

    def __exit__(self, *exc):
        _active().remove(self)
        return self.mode.__exit__(*exc)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62


def copied_times(shape: tuple[int, ...], source: int) -> str:
    """How many times a copy's elements outnumber those of what it was made from."""
    return f"{math.prod(shape) / source:g}×"


# The watchers a check may ask the sandbox's worker for, by name; each is made from the watched tensors,
# entered around the call, and has `given`, `report()` and `absorb(report)`.
WATCHERS = {KeyValueCopies.name: KeyValueCopies}
_LOCAL = threading.local()  # the watchers entered in this thread (the grader grades in several), innermost last


def _active() -> list:
    if not hasattr(_LOCAL, "watchers"):
        _LOCAL.watchers = []
    return _LOCAL.watchers


def watching(args) -> dict:
    """{watcher name: (the watcher, the positions in `args` of the tensors it watches)} for the innermost
    active watcher of each name, in this thread, whose tensors are all among `args` (the grader sends the
    positions with the call, the worker watches those, and its report goes to that watcher)."""
    found = {}
    for watcher in reversed(_active()):
        positions = [next((i for i, a in enumerate(args) if a is t), None) for t in watcher.given]
        if watcher.name not in found and positions and None not in positions:
            found[watcher.name] = (watcher, positions)
    return found
