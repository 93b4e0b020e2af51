"""A child process per submitted notebook that runs the student's code and nothing of the grader's
(course tooling; the child side is `attention_book.course.worker`).

What is isolated, everywhere: the child is its own process group and session, works in a fresh scratch
folder (also its HOME and TMPDIR), gets an environment with nothing of the grader's in it (PATH, locale
and thread count only), a wall-clock limit for the whole notebook, and limits on memory (address space,
per process), CPU time and file size. The number of processes it starts is not limited (RLIMIT_NPROC does
not bind root, nor inside a user namespace), so a submission that forks can use MEMORY_MB per process:
grade where a cgroup bounds the whole run (see the README). Its answers are JSON values (never pickles) that the grader judges itself.

On Linux with unprivileged user namespaces (`unshare -r` works) the child also gets a new network
namespace (no network at all), a PID namespace (it cannot see or signal the grader or other processes:
`os.getppid()` is 0, `kill(-1)` reaches only itself), and a mount namespace in which the submissions, the
grade tables and the chapters (the teacher's solutions) are hidden behind empty folders and every
other file is read-only, but for the scratch folder; it then drops every capability, so it cannot
unmount or remount anything. Elsewhere (macOS, Windows' WSL1, containers that forbid
user namespaces) none of those four hold: the child can use the network, read what the teacher can
read, and signal the teacher's other processes. Grade on Linux, or as a user of its own, there.
"""

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import wire

MEMORY_MB = 2048  # address space of the child (MB); importing torch and numpy takes about 0.7 GB of it
FILE_MB = 64  # largest file, and largest answer, the child may write
ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the attention_book package
WORKER = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from attention_book.course.worker import main; main()"
_NAMESPACES: dict[str, str | None] = {}


class SandboxEnded(Exception):
    """The child stopped answering: it exited, was killed, ran out of time or broke the protocol."""


def namespace_prefix(hidden: list[Path], writable: Path) -> list[str]:
    """The command that wraps the child in new user, network, PID and mount namespaces (Linux only).

    In its mount namespace the `hidden` folders are covered by empty ones, every mount is made read-only,
    and only `writable` (the scratch folder) is mounted again with writes allowed; then every capability
    is dropped, so none of it can be undone. The shell stays the namespace's PID 1 (which ignores signals
    it has no handler for), so the worker is an ordinary process: it can kill itself, and killing
    everything it can reach ends only the sandbox.
    """
    hide = ('while [ "$1" != -- ]; do mount -t tmpfs -o size=1m,mode=000 none "$1" 2>/dev/null || [ ! -e "$1" ] '
            '|| exit 97; shift; done; shift; ')
    read_only = ('W="$1"; shift; mount --bind "$W" "$W" || exit 96; '
                 'for m in $(cut -d" " -f5 /proc/self/mountinfo); do '
                 '[ "$m" = "$W" ] || mount -o remount,bind,ro "$m" 2>/dev/null; done; cd "$W" || exit 96; unset OLDPWD; ')
    return ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--mount-proc",
            "sh", "-c", hide + read_only + 'setpriv --bounding-set=-all --inh-caps=-all --no-new-privs "$@"; exit $?',
            "sh", *[str(p) for p in hidden], "--", str(writable)]


def isolation() -> str | None:
    """None when namespaces work here, else why not (probed once)."""
    if "why" not in _NAMESPACES:
        why = None
        if not sys.platform.startswith("linux") or shutil.which("unshare") is None or shutil.which("setpriv") is None:
            why = f"{sys.platform} has no unshare/setpriv"
        else:
            with tempfile.TemporaryDirectory() as folder:
                probe = subprocess.run([*namespace_prefix([Path(folder)], Path(folder)), "true"], capture_output=True,
                                       text=True)
            if probe.returncode != 0:
                why = f"unshare failed: {probe.stderr.strip()[:200]}"
        _NAMESPACES["why"] = why
    return _NAMESPACES["why"]


def describe_isolation() -> str:
    """One line for the grading log: what the sandbox isolates on this machine."""
    why = isolation()
    if why is None:
        return "sandbox: own process group, scratch folder, clean environment, time/memory limits, no network, own PIDs, " \
               "submissions/grades/chapters hidden, every file read-only but the scratch folder"
    return f"sandbox: own process group, scratch folder, clean environment, time/memory limits only ({why}): the " \
           "network, the teacher's files and processes are NOT isolated"


def _limits(seconds: float, memory_mb: int):
    def apply():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_MB << 20, FILE_MB << 20))
        cpu = int(seconds) + 5
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


class Sandbox:
    """One child process for one notebook: `define` a solution cell, then `call` its function.

    `timeout` bounds the whole conversation (seconds); `hidden` are folders the child must not see.
    """

    def __init__(self, timeout: float = 60, memory_mb: int = MEMORY_MB, hidden: tuple[Path, ...] = ()):
        self.deadline = time.monotonic() + timeout
        self.scratch = tempfile.mkdtemp(prefix="attention-book-grading-")
        env = {"PATH": os.defpath, "HOME": self.scratch, "TMPDIR": self.scratch, "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
        # Without namespaces a shell still stands between the grader and the worker: os.getppid() is the shell.
        prefix = namespace_prefix([p for p in hidden if p.is_dir()], Path(self.scratch)) if isolation() is None else \
            ["sh", "-c", '"$@"; exit $?', "sh"]
        self.process = subprocess.Popen([*prefix, sys.executable, "-I", "-c", WORKER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=self.scratch, env=env,
                                        start_new_session=True,
                                        preexec_fn=_limits(timeout, memory_mb))
        self.buffer = b""
        self.ended: str | None = None
        try:
            self._receive()  # {"ready": true}
        except SandboxEnded:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Kill the child's whole process group and remove its scratch folder."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            stream.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def define(self, source: str, function: str) -> None:
        """Run a solution cell in the child; raises the submission's error as `SubmissionError`."""
        answer = self._exchange({"define": source, "function": function})
        if "raised" in answer:
            raise SubmissionError(answer)
        if answer != {"defined": True}:
            raise self._end("it answered out of turn (forged answers on the grader's channel)")

    def call(self, *args):
        """The student's function on `args`, run in the child; returns the decoded value or raises."""
        answer = self._exchange({"call": wire.encode(list(args))})
        if set(answer) == {"value"}:
            try:
                return wire.decode(answer["value"])
            except (ValueError, TypeError) as error:
                raise self._end(f"its answer is not a plain value ({error})") from None
        if set(answer) == {"raised", "message"} and isinstance(answer["raised"], str):
            raise SubmissionError(answer)
        raise self._end("it answered out of turn (forged answers on the grader's channel)")

    def _exchange(self, request: dict) -> dict:
        if self.ended:
            raise SandboxEnded(self.ended)
        try:
            self.process.stdin.write(json.dumps(request, allow_nan=False).encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._end() from None
        return self._receive()

    def _receive(self) -> dict:
        """The child's next line, within the deadline and the size limit."""
        stream = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise self._end("time limit reached")
            if not select.select([stream], [], [], left)[0]:
                continue
            chunk = os.read(stream, 1 << 20)
            if not chunk:
                raise self._end()
            self.buffer += chunk
            if len(self.buffer) > FILE_MB << 20:
                raise self._end(f"its answer exceeds {FILE_MB} MB")
        line, self.buffer = self.buffer.split(b"\n", 1)
        if self.buffer:  # the worker answers once per request and then waits: more is a forgery
            raise self._end("it answered out of turn (forged answers on the grader's channel)")
        try:
            answer = json.loads(line)
        except ValueError:
            raise self._end("it wrote something that is not an answer") from None
        if not isinstance(answer, dict):
            raise self._end("it wrote something that is not an answer")
        return answer

    def _end(self, why: str | None = None) -> SandboxEnded:
        """Stop the child and say why, once; every later call raises the same."""
        if self.ended is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            code = self.process.wait()
            if why is None:
                why = f"it exited with status {code}" if code >= 0 else f"it was killed by {signal.Signals(-code).name}"
                if code in (128 + signal.SIGKILL, -signal.SIGKILL) and time.monotonic() < self.deadline:
                    why = "it was killed (by itself, or for exceeding the memory limit)"
                elif code == 128 + signal.SIGXCPU or code == -signal.SIGXCPU:
                    why = "it used up its CPU time"
            self.ended = f"the grading process of this notebook stopped: {why}"
        return SandboxEnded(self.ended)


class SubmissionError(Exception):
    """An exception the student's code raised in the child, by name and message."""

    def __init__(self, answer: dict):
        self.name, self.message = str(answer.get("raised"))[:100], str(answer.get("message"))[:2000]
        super().__init__(f"{self.name}: {self.message}")
