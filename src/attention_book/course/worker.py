"""The child side of grading: runs inside the sandbox, defines a submission's solution and calls it on the
grader's inputs (course tooling; the parent side is `attention_book.course.sandbox`; the switching off of
what an exercise forbids is `attention_book.course.forbid`, shared with the notebook's `check()`).

Messages are JSON lines (`attention_book.course.wire`). This process imports torch and numpy once, then
forks one process per exercise: the grader sends {"define": source, "function": name, "forbidden":
[dotted names]}, the exercise's process makes the forbidden functions raise (`Forbidden`), runs the solution
cell and answers {"defined": true}, then answers each {"call": [arguments]} with one line, until {"done":
true}; when that process has ended, for whatever reason, this one answers {"over": exit status}. Between two
notebooks of the same student, {"reset": true} kills every other process of the sandbox and empties its
scratch folder and /dev/shm (`reset`); {"preload": [names]} imports modules of `wire.PRELOADABLE` here, before
the exercise's fork, so that each exercise of a TensorFlow chapter does not import TensorFlow again (seconds
each). So what
one exercise's code patches or breaks never reaches the next. Nothing it answers is trusted: the grader
judges the values it receives, in its own process.

Walls inside the sandbox (issue 47): once torch is loaded, a seccomp filter makes execve fail in this
process and every process it forks, so no program and no fresh interpreter can start (one would not carry
the switched-off functions); `forbid`'s audit hook says so in words (subprocess, os.exec*, posix_spawn, os.system)
and refuses, while an exercise runs, to open or execute again the files that define its forbidden functions
(a second copy of a module loaded from its file) and to load C libraries with ctypes; the forbidden torch
functions are switched off in torch's operator registry too (`forbid.ATEN`), so `torch.ops.aten.*` and
`torch._C._nn.*` reach the same raiser. Each call also reports the largest tensor the function made
(`LargestTensor`), for the exercises that ask for a method ("in blocks"), what happened to the arguments
the check spies on (`spy.spy_tensor`), and what the check's watchers saw (`spy.WATCHERS`: {"watch":
{name: [positions]}} in the call, {"watched": {name: report}} in the answer; ch3.mqa's copies of the keys
and values). These reports come from the process the student's code runs in: see `spy` for what a student
can and cannot defeat.
"""

import contextlib
import json
import os
import platform
import sys
import traceback

from attention_book.course.forbid import Forbidden

_KEEP: list = []  # the exercise's switched-off functions stay off as long as its process lives


def preload(names) -> list[str]:
    """Import the named modules of `wire.PRELOADABLE` in this process (the exercises' forks inherit them); the
    names imported (one that is not installed is skipped). Anything else in `names` is ignored (the request
    comes from the grader, but is checked)."""
    import importlib

    from attention_book.course.wire import PRELOADABLE

    loaded = []
    for name in [n for n in PRELOADABLE if isinstance(names, list) and n in names]:
        try:
            importlib.import_module(name)
        except ImportError:  # not installed: the exercise's own process imports it, or says why not
            continue
        loaded.append(name)
    return loaded


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
    from attention_book.course.spy import plain, spy_tensor, WATCHERS

    _KEEP.append(Forbidden(request.get("forbidden", [])).__enter__())  # for good: the process ends after
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
            spied = {}
            for index, names in dict(request.get("spies", {})).items():  # the arguments the check watches
                if 0 <= int(index) < len(arguments):
                    spied[index] = []
                    arguments[int(index)] = spy_tensor(arguments[int(index)], spied[index], set(names))
            watchers = {name: WATCHERS[name](*[arguments[i] for i in positions])  # the check's watchers
                        for name, positions in dict(request.get("watch", {})).items()}
            with LargestTensor() as measured, contextlib.ExitStack() as watching:
                for watcher in watchers.values():
                    watching.enter_context(watcher)
                value = function(*arguments)
        except BaseException as error:  # noqa: BLE001
            traceback.print_exc()
            _answer(channel, _raised(error))
            continue
        try:
            answer = {"value": wire.encode(value), "largest": measured.largest}
            writes = [i for i in request.get("writes", []) if isinstance(i, int) and 0 <= i < len(arguments)]
            if writes:  # the arguments the exercise asks to change in place, as the call left them
                answer["written"] = {str(i): wire.encode(plain(arguments[i])) for i in writes}
            if watchers:
                answer["watched"] = {name: watcher.report() for name, watcher in watchers.items()}
            if spied:
                answer["spied"] = {index: [list(entry) for entry in entries[:10_000]] for index, entries in spied.items()}
            _answer(channel, answer)
        except (TypeError, ValueError) as error:
            _answer(channel, {"raised": "TypeError", "message": f"your function returned something that cannot be "
                                                                f"graded: {error}"})


def reset(seconds: float = 2.0) -> bool:
    """Make this sandbox as the next notebook of the same student would find a fresh one: every process
    but this one and the namespace's init killed, /dev/shm emptied, the scratch folder emptied but for an
    emptied output.log. False when that could not be done (the grader then starts a fresh sandbox)."""
    import shutil
    import signal
    import time

    mine = {1, os.getpid()}
    deadline = time.monotonic() + seconds
    while True:
        others = {int(p) for p in os.listdir("/proc") if p.isdigit()} - mine
        if not others:
            break
        if time.monotonic() > deadline:
            return False
        try:
            os.kill(-1, signal.SIGKILL)  # every process of the namespace but init and this one
        except ProcessLookupError:
            pass
        time.sleep(0.005)
    try:
        for folder in ("/dev/shm", "."):
            with os.scandir(folder) as entries:
                for entry in entries:
                    if folder == "." and entry.name == "output.log":
                        os.truncate(entry.path, 0)
                    elif entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path)
                    else:
                        os.unlink(entry.path)
            if any(os.scandir(folder)) and folder == "/dev/shm":
                return False
    except OSError:
        return False
    return sorted(os.listdir(".")) in ([], ["output.log"])


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
        if request == {"reset": True}:  # the next notebook of the same student
            _answer(channel, {"reset": reset()})
            continue
        if isinstance(request, dict) and set(request) == {"preload"}:
            _answer(channel, {"preloaded": preload(request["preload"])})
            continue
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
