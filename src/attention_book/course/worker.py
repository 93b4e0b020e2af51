"""The child side of grading: runs inside the sandbox, defines a submission's solution and calls it on the
grader's inputs (course tooling; the parent side is `attention_book.course.sandbox`).

Messages are JSON lines (`attention_book.course.wire`). This process imports torch and numpy once, then
forks one process per exercise: the grader sends {"define": source, "function": name, "forbidden":
[dotted names]}, the exercise's process makes the forbidden functions raise (`forbid`), runs the solution
cell and answers {"defined": true}, then answers each {"call": [arguments]} with one line, until {"done":
true}; when that process has ended, for whatever reason, this one answers {"over": exit status}. So what
one exercise's code patches or breaks never reaches the next. Nothing it answers is trusted: the grader
judges the values it receives, in its own process.
"""

import importlib
import importlib.abc
import json
import os
import sys
import traceback


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


def _switch_off(dotted: str) -> None:
    try:
        owner, name = _owner(dotted)
        original = getattr(owner, name)
    except (ImportError, AttributeError):
        return  # not installed here: nothing to call
    raiser = _raiser(dotted)
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


def forbid(forbidden: list[str]) -> None:
    """Make every function named in `forbidden` raise `ForbiddenCall`, wherever it is reached from."""
    for dotted in forbidden:
        _switch_off(dotted)
    sys.meta_path.insert(0, _Guard(list(forbidden)))


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
    namespace = {"__name__": "__submission__"}
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
            value = function(*wire.decode(request["call"]))
        except BaseException as error:  # noqa: BLE001
            traceback.print_exc()
            _answer(channel, _raised(error))
            continue
        try:
            _answer(channel, {"value": wire.encode(value)})
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

    _answer(channel, {"ready": True})
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
