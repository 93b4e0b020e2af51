"""Switching off what an exercise asks the student to write (course tooling; issue 47). The one home of
the exercises' "Write it yourself" rule, shared by the grader's worker inside the sandbox (switched off
for the rest of the exercise's process) and the notebook's instant `check()` (switched off around each
call of the student's function, then everything put back).

`Forbidden(names)` makes every function named (dotted) raise `ForbiddenCall` wherever it is reached
from: its owner, every alias in a loaded module (`from x import f`), torch's operator registry (`ATEN`:
`torch.ops.aten.*`, `torch._C._nn.*`), a module imported or re-imported while it is on (`_Guard`). An
audit hook (`_Walls`) refuses, while it is on, to start a process (a fresh interpreter would not carry
the switched-off functions), to load C code with ctypes, and to open or execute again the files that
define the forbidden functions (a second copy of a module loaded from its file).
"""

import importlib
import importlib.abc
import os
import sys
import warnings

# The torch operators behind each forbidden torch function: switched off in the operator registry too.
_SDPA = ("scaled_dot_product_attention", "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
         "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
         "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable")
_NLL = ("nll_loss", "nll_loss_nd", "nll_loss2d", "nll_loss_forward")
_SOFTMAX = ("softmax", "_softmax", "_safe_softmax")
ATEN = {
    "torch.nn.functional.scaled_dot_product_attention": _SDPA,
    "torch.cumsum": ("cumsum", "cumsum_"), "torch.Tensor.cumsum": ("cumsum", "cumsum_"),
    "torch.nn.functional.embedding": ("embedding",),
    "torch.nn.functional.cross_entropy": ("cross_entropy_loss", *_NLL),
    "torch.nn.functional.nll_loss": _NLL,
    "torch.nn.functional.multi_head_attention_forward": ("_native_multi_head_attention",),
    "torch.softmax": _SOFTMAX, "torch.nn.functional.softmax": _SOFTMAX, "torch.Tensor.softmax": _SOFTMAX,
    "torch.nn.functional.one_hot": ("one_hot",),
}
_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CPU", "AutogradCPU")
# What starting a process raises as audit events; ctypes' loading of C code (it could call execve or open
# directly).
PROCESS_EVENTS = {"subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.fork_exec",
                  "pty.spawn", "os.startfile"}
NATIVE_EVENTS = {"ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle"}
_ABSENT = object()  # an attribute a class inherited rather than held itself


class ForbiddenCall(RuntimeError):
    """A function the exercise asks the student to write was called."""


def _raiser(dotted: str):
    name = dotted.rsplit(".", 1)[1]

    def forbidden(*args, **kwargs):
        raise ForbiddenCall(f"this exercise asks you to write {name} yourself: {dotted} is switched off while "
                            "your solution is graded")
    forbidden.__name__ = forbidden.__qualname__ = name
    return forbidden


def _owner(dotted: str):
    """The module or class that holds the last part of `dotted`, and that part's name."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:-1]:
            owner = getattr(owner, part)
        return owner, parts[-1]
    raise ImportError(dotted)


class Forbidden:
    """A context in which the functions named in `forbidden` raise `ForbiddenCall` (see the module
    docstring); leaving it puts back every function, alias, operator and import hook it changed.
    `namespaces` are dictionaries to search for aliases besides the loaded modules' (a solution's
    globals). Entered again, it switches off the same places without searching the modules again."""

    def __init__(self, forbidden, namespaces=()):
        self.forbidden = tuple(forbidden)
        self.namespaces = [n for n in namespaces if isinstance(n, dict)]
        self.files: set[str] = set()
        self.places: dict[str, list] = {}  # dotted -> [(holder, key)] where the original was found
        self.originals: dict[str, object] = {}
        self.saved: list = []  # (holder, key, the value before), put back in reverse order
        self.library = self.guard = None

    def __enter__(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns that it overrides a kernel: that is the point
            if any(dotted in ATEN for dotted in self.forbidden):
                import torch

                self.library = torch.library.Library("aten", "IMPL")
            for dotted in self.forbidden:
                self._switch_off(dotted)
        self.guard = _Guard(self)
        sys.meta_path.insert(0, self.guard)
        _walls().files.append(self.files)
        return self

    def __exit__(self, *exc):
        walls = _walls()
        if self.files in walls.files:
            walls.files.remove(self.files)
        if self.guard in sys.meta_path:
            sys.meta_path.remove(self.guard)
        self.guard = None
        for holder, key, value in reversed(self.saved):
            _put(holder, key, value)
        self.saved = []
        if self.library is not None:
            self.library._destroy()  # torch's operators as they were
            self.library = None
        return False

    def _switch_off(self, dotted: str, search: bool = False) -> None:
        """Make `dotted` raise: in its owner, in every place an alias of it was found, in torch's operator
        registry; `search` looks through the loaded modules again (a module imported while on)."""
        if dotted not in self.originals:
            try:
                owner, name = _owner(dotted)
                original = getattr(owner, name)
            except (ImportError, AttributeError):
                return  # not installed here: nothing to call
            self.originals[dotted] = original
            self.places[dotted] = [(owner, name)]
            code = getattr(getattr(original, "__func__", original), "__code__", None)
            if code is not None and code.co_filename.endswith(".py"):
                self.files.add(os.path.realpath(code.co_filename))
            search = True
        original, raiser = self.originals[dotted], _raiser(dotted)
        if search:
            known = {(id(holder), key) for holder, key in self.places[dotted]}
            self.places[dotted] += [place for place in _aliases(original, self.namespaces)
                                    if (id(place[0]), place[1]) not in known]
        if self.library is not None:
            for op in ATEN.get(dotted, ()):
                for key in _KEYS:
                    try:
                        self.library.impl(op, _raiser(dotted), key)
                    except (RuntimeError, AttributeError, ValueError):
                        pass  # no such operator or key in this torch, or already switched off
        for holder, key in self.places[dotted]:
            before = _get(holder, key)
            if before is original or (holder, key) == self.places[dotted][0]:
                if _put(holder, key, raiser):
                    self.saved.append((holder, key, before))


def _aliases(original, namespaces) -> list:
    """Every (module or dictionary, name) that holds `original`."""
    found = []
    holders = [m for m in list(sys.modules.values()) if isinstance(getattr(m, "__dict__", None), dict)]
    for holder in [*holders, *namespaces]:
        space = holder if isinstance(holder, dict) else holder.__dict__
        found += [(holder, key) for key, value in list(space.items()) if value is original]
    return found


def _get(holder, key):
    if isinstance(holder, dict):
        return holder.get(key, _ABSENT)
    if isinstance(holder, type) and key not in vars(holder):
        return _ABSENT  # inherited (torch.Tensor.softmax): put back by deleting the shadow
    return getattr(holder, key, _ABSENT)


def _put(holder, key, value) -> bool:
    """Set (or, for _ABSENT, remove) `key` of `holder`; False where it cannot be changed."""
    try:
        if isinstance(holder, dict):
            if value is _ABSENT:
                holder.pop(key, None)
            else:
                holder[key] = value
        elif value is _ABSENT:
            delattr(holder, key)
        else:
            setattr(holder, key, value)
        return True
    except (AttributeError, TypeError):
        return False


class _Guard(importlib.abc.MetaPathFinder):
    """Switches the forbidden functions off again in any module imported or re-imported while on (reload)."""

    def __init__(self, forbidden: Forbidden):
        self.forbidden = forbidden

    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            if isinstance(finder, _Guard) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _GuardedLoader(spec.loader, self.forbidden)
                return spec
        return None


class _GuardedLoader(importlib.abc.Loader):
    def __init__(self, loader, forbidden: Forbidden):
        self.loader, self.forbidden = loader, forbidden

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        if self.forbidden.guard is not None:  # still on
            for dotted in self.forbidden.forbidden:
                self.forbidden._switch_off(dotted, search=True)

    def __getattr__(self, name):
        return getattr(self.loader, name)


class _Walls:
    """The process's one audit hook (audit hooks cannot be removed): while a `Forbidden` is on, no process
    starts, no C library loads, and the files that define the forbidden functions are neither read nor
    executed again. Off, it lets everything through."""

    def __init__(self):
        self.files: list[set] = []  # one set per Forbidden that is on

    def protected(self, path) -> bool:
        try:
            path = os.fsdecode(path) if not isinstance(path, int) else None
        except TypeError:
            return False
        if not path:
            return False
        files = set().union(*self.files)
        names = {os.path.basename(f) for f in files} | {os.path.basename(f)[:-3] for f in files}
        base = os.path.basename(path)
        if base not in names and base.split(".")[0] not in names:
            return False
        real = os.path.realpath(path)
        folder, base = os.path.split(real)
        if os.path.basename(folder) == "__pycache__":  # a module's cached bytecode: stem.cpython-3xx.pyc
            folder, base = os.path.dirname(folder), base.split(".")[0] + ".py"
        return os.path.join(folder, base if base.endswith(".py") else base + ".py") in files

    def __call__(self, event: str, args) -> None:
        if not self.files:
            return
        if event in PROCESS_EVENTS:
            raise PermissionError("no process may start while your solution is graded (write it in Python, in "
                                  "this cell)")
        if event in NATIVE_EVENTS:
            raise PermissionError("ctypes may not load C code while your solution is graded")
        if event == "open" and args and self.protected(args[0]):
            raise PermissionError(f"{args[0]} defines a function this exercise asks you to write: it cannot be "
                                  "read while your solution is graded")
        if event == "exec" and args and self.protected(getattr(args[0], "co_filename", None)):
            raise ImportError("a second copy of a module that defines a function this exercise asks you to write "
                              "cannot be loaded while your solution is graded")


_HOOK: list[_Walls] = []


def _walls() -> _Walls:
    """This process's audit hook, installed the first time a `Forbidden` is entered."""
    if not _HOOK:
        _HOOK.append(_Walls())
        sys.addaudithook(_HOOK[0])
    return _HOOK[0]


def forbidding(function, forbidden):
    """`function`, called with the functions named in `forbidden` switched off (the notebook's `check()`):
    each call enters `Forbidden` and leaves it, so everything works again between and after the calls."""
    if not forbidden:
        return function
    context = Forbidden(forbidden, namespaces=[getattr(function, "__globals__", None)])

    def call(*args, **kwargs):
        with context:
            return function(*args, **kwargs)
    return call
