"""The child side of grading: runs inside the sandbox, defines a submission's solution and calls it on the
grader's inputs (course tooling; the parent side is `attention_book.course.sandbox`).

Messages are JSON lines (`attention_book.course.wire`): the grader sends {"define": source, "function":
name} or {"call": [arguments]}, and this process answers each with one line. Nothing it answers is
trusted: the grader judges the values it receives, in its own process.
"""

import json
import os
import sys
import traceback


def _answer(channel, message: dict) -> None:
    channel.write(json.dumps(message, allow_nan=False) + "\n")
    channel.flush()


def _raised(error: BaseException) -> dict:
    return {"raised": type(error).__name__, "message": str(error)[:2000]}


def main() -> None:
    """Serve the grader's requests on the original stdin/stdout; the submission's own output goes to a log."""
    requests = os.fdopen(os.dup(0), "r")
    channel = os.fdopen(os.dup(1), "w")
    log = os.open("output.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    import numpy  # noqa: F401 - loaded once, before any submission runs
    import torch  # noqa: F401

    from attention_book.course import wire

    function = None
    _answer(channel, {"ready": True})
    for line in requests:
        request = json.loads(line)
        if "define" in request:
            namespace = {"__name__": "__submission__"}
            try:
                exec(compile(request["define"], "<your solution cell>", "exec"), namespace)  # noqa: S102
                function = namespace.get(request["function"])
                if not callable(function):
                    raise NameError(f"your solution cell does not define {request['function']}()")
                _answer(channel, {"defined": True})
            except BaseException as error:  # noqa: BLE001 - the submission's error is feedback
                _answer(channel, _raised(error))
        else:
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


if __name__ == "__main__":
    sys.exit(main())
