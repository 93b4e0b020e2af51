"""The child side of grading: runs inside the sandbox, defines a submission's solution and calls it on the
grader's inputs (course tooling; the parent side is `attention_book.course.sandbox`).

Messages are JSON lines (`attention_book.course.wire`). This process imports torch and numpy once, then
forks one process per exercise: the grader sends {"define": source, "function": name, "forbidden":
[dotted names]}, the exercise's process makes the forbidden functions raise (`forbid`), runs the solution
cell and answers {"defined": true}, then answers each {"call": [arguments]} with one line, until {"done":
true}; when that process has ended, for whatever reason, this one answers {"over": exit status}. So what
one exercise's code patches or breaks never reaches the next. Nothing it answers is trusted: the grader
judges the values it receives, in its own process.

Walls inside the sandbox (issue 47): once torch is loaded, a seccomp filter makes execve fail in this
process and every process it forks, so no program and no fresh interpreter can start (one would not carry
the switched-off functions); an audit hook says so in words (subprocess, os.exec*, posix_spawn, os.system)
and refuses, while an exercise runs, to open or execute again the files that define its forbidden functions
(a second copy of a module loaded from its file) and to load C libraries with ctypes; the forbidden torch
functions are switched off in torch's operator registry too (`ATEN`), so `torch.ops.aten.*` and
`torch._C._nn.*` reach the same raiser. Each call also reports the largest tensor the function made
(`LargestTensor`), for the exercises that ask for a method ("in blocks").
"""

import importlib
import importlib.abc
import json
import os
import platform
import sys
import traceback

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


def _switch_off(dotted: str, files: set | None = None, library=None) -> None:
    """Make `dotted` raise wherever it is reached from; add the file that defines it to `files` and its
    torch operators (`ATEN`) to `library`'s overrides."""
    try:
        owner, name = _owner(dotted)
        original = getattr(owner, name)
    except (ImportError, AttributeError):
        return  # not installed here: nothing to call
    raiser = _raiser(dotted)
    code = getattr(getattr(original, "__func__", original), "__code__", None)
    if files is not None and code is not None and code.co_filename.endswith(".py"):
        files.add(os.path.realpath(code.co_filename))
    if library is not None:
        for op in ATEN.get(dotted, ()):
            for key in _KEYS:
                try:
                    library.impl(op, _raiser(dotted), key)
                except (RuntimeError, AttributeError, ValueError):
                    pass  # no such operator or key in this torch
    setattr(owner, name, raiser)
    for module in list(sys.modules.values()):  # every alias: `from x import f` elsewhere, torch._C._nn
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            if value is original:
                try:
                    setattr(module, key, raiser)
                except (AttributeError, TypeError):
                    pass


class _Guard(importlib.abc.MetaPathFinder):
    """Switches the forbidden functions off again in any module imported or re-imported later (reload)."""

    def __init__(self, forbidden: list[str]):
        self.forbidden = forbidden

    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _GuardedLoader(spec.loader, self.forbidden)
                return spec
        return None


class _GuardedLoader(importlib.abc.Loader):
    def __init__(self, loader, forbidden):
        self.loader, self.forbidden = loader, forbidden

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        for dotted in self.forbidden:
            _switch_off(dotted)

    def __getattr__(self, name):
        return getattr(self.loader, name)


class _Walls:
    """The audit hook of an exercise's process: no process starts, no C library loads, and the files that
    define the forbidden functions are neither read nor executed again."""

    def __init__(self, files: set):
        self.files = files
        self.names = {os.path.basename(f) for f in files} | {os.path.basename(f)[:-3] for f in files}

    def protected(self, path) -> bool:
        try:
            path = os.fsdecode(path) if not isinstance(path, int) else None
        except TypeError:
            return False
        if not path:
            return False
        base = os.path.basename(path)
        if base not in self.names and base.split(".")[0] not in self.names:
            return False
        real = os.path.realpath(path)
        folder, base = os.path.split(real)
        if os.path.basename(folder) == "__pycache__":  # a module's cached bytecode: stem.cpython-3xx.pyc
            folder, base = os.path.dirname(folder), base.split(".")[0] + ".py"
        return os.path.join(folder, base if base.endswith(".py") else base + ".py") in self.files

    def __call__(self, event: str, args) -> None:
        if event in PROCESS_EVENTS:
            raise PermissionError("no process may start while your solution is graded (write it in Python, in "
                                  "this cell)")
        if event in NATIVE_EVENTS:
            raise PermissionError("ctypes may not load C code while your solution is graded")
        if event == "open" and self.files and args and self.protected(args[0]):
            raise PermissionError(f"{args[0]} defines a function this exercise asks you to write: it cannot be "
                                  "read while your solution is graded")
        if event == "exec" and self.files and args and self.protected(getattr(args[0], "co_filename", None)):
            raise ImportError("a second copy of a module that defines a function this exercise asks you to write "
                              "cannot be loaded while your solution is graded")


def forbid(forbidden: list[str]) -> None:
    """Make every function named in `forbidden` raise `ForbiddenCall`, wherever it is reached from: its
    aliases, torch's operator registry, a re-import, a second copy loaded from its file (refused)."""
    files: set[str] = set()
    library = None
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that it overrides a kernel: that is the point
        if any(dotted in ATEN for dotted in forbidden):
            import torch

            library = torch.library.Library("aten", "IMPL")
            _KEEP.append(library)
        for dotted in forbidden:
            _switch_off(dotted, files, library)
    sys.meta_path.insert(0, _Guard(list(forbidden)))
    sys.addaudithook(_Walls(files))


_KEEP: list = []  # the operator overrides live as long as the exercise's process


def no_new_programs() -> bool:
    """A seccomp filter on this process and all it forks: execve and execveat fail with EPERM (Linux on
    x86-64 or ARM64); False where none could be installed."""
    arch = {"x86_64": (0xC000003E, 59, 322), "aarch64": (0xC00000B7, 221, 281)}.get(platform.machine())
    if arch is None or not sys.platform.startswith("linux"):
        return False
    import ctypes

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    audit, execve, execveat = arch
    load, equal, at_least, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    rules = [(load, 0, 0, 4), (equal, 1, 0, audit), (ret, 0, 0, deny), (load, 0, 0, 0),
             (at_least, 3, 0, 0x40000000), (equal, 2, 0, execve), (equal, 1, 0, execveat), (ret, 0, 0, allow),
             (ret, 0, 0, deny)]
    filters = (Filter * len(rules))(*[Filter(*rule) for rule in rules])
    program = Program(len(rules), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return libc.prctl(22, 2, ctypes.byref(program), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


class _Shell:
    """`get_ipython()` for a solution cell that Jupyter's magics were translated in (`%matplotlib`, `!pip`):
    the magics do nothing when grading."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class LargestTensor:
    """The number of elements of the largest tensor made while it is active (a torch function mode: every
    torch function, tensor method and operator the code calls)."""

    def __init__(self):
        from torch.overrides import TorchFunctionMode

        outer = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                import torch

                value = func(*args, **(kwargs or {}))
                for item in value if isinstance(value, (tuple, list)) else (value,):
                    if isinstance(item, torch.Tensor):
                        outer.largest = max(outer.largest, item.numel())
                return value

        self.largest, self.mode = 0, Mode()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def _answer(channel, message: dict) -> None:
    channel.write(json.dumps(message, allow_nan=False) + "\n")
    channel.flush()


def _raised(error: BaseException) -> dict:
    return {"raised": type(error).__name__, "message": str(error)[:2000]}


def _lines(fd: int):
    """The grader's requests, one line at a time, read without a buffer (a forked exercise reads the same
    pipe, so nothing may be read ahead)."""
    while True:
        line = bytearray()
        while not line.endswith(b"\n"):
            chunk = os.read(fd, 1)
            if not chunk:
                return
            line += chunk
        yield json.loads(line)


def _serve_exercise(requests, channel, request) -> None:
    """One exercise, in its own process: forbid, define, answer calls until done."""
    from attention_book.course import wire

    forbid(request.get("forbidden", []))
    namespace = {"__name__": "__submission__", "get_ipython": _Shell}
    try:
        exec(compile(request["define"], "<your solution cell>", "exec"), namespace)  # noqa: S102
        function = namespace.get(request["function"])
        if not callable(function):
            raise NameError(f"your solution cell does not define {request['function']}()")
        _answer(channel, {"defined": True})
    except BaseException as error:  # noqa: BLE001 - the submission's error is feedback
        _answer(channel, _raised(error))
        function = None
    for request in requests:
        if "call" not in request or function is None:
            return
        try:
            arguments = wire.decode(request["call"])
            with LargestTensor() as measured:
                value = function(*arguments)
        except BaseException as error:  # noqa: BLE001
            traceback.print_exc()
            _answer(channel, _raised(error))
            continue
        try:
            _answer(channel, {"value": wire.encode(value), "largest": measured.largest})
        except (TypeError, ValueError) as error:
            _answer(channel, {"raised": "TypeError", "message": f"your function returned something that cannot be "
                                                                f"graded: {error}"})


def main(processes: int | None = None) -> None:
    """Serve the grader's requests on the original stdin/stdout; the submission's own output goes to a log.
    `processes` bounds the processes of this user namespace (RLIMIT_NPROC, set here, inside it)."""
    if processes is not None:
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    fd = os.dup(0)
    channel = os.fdopen(os.dup(1), "w")
    log = os.open("output.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    import numpy  # noqa: F401 - loaded once, before any submission runs
    import torch  # noqa: F401

    import attention_book  # noqa: F401
    from attention_book.course import wire  # noqa: F401

    _answer(channel, {"ready": True, "sealed": no_new_programs()})
    requests = _lines(fd)
    for request in requests:
        if "define" not in request:
            _answer(channel, {"over": None})  # no exercise is running
            continue
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                _serve_exercise(requests, channel, request)
            except BaseException:  # noqa: BLE001
                status = 1
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        _answer(channel, {"over": code})


if __name__ == "__main__":
    sys.exit(main())
