"""A child process per submitted notebook that runs the student's code and nothing of the grader's
(course tooling; the child side is `attention_book.course.worker`).

The child's view of the machine is built from an allow-list with bubblewrap (`bwrap`, Debian's and
Ubuntu's `bubblewrap` package; `make bwrap` installs it): a new root that holds only the operating system's
programs and libraries (/usr and its links), the Python interpreter and standard library, the installed
packages (site-packages; the grader's checks covered by an empty folder), this package's own files one by
one where it is installed from a checkout (nothing else of the checkout), and a scratch folder on a tmpfs
of SCRATCH_MB, the only writable place besides /dev/shm (a tmpfs of SHM_MB). Nothing else of the machine
exists there: not the working directory or PYTHONPATH's folders, no home folder, no /tmp, no
submissions, no grades, no Unix socket of the host. It also gets new user, PID, network, IPC and UTS namespaces (no network at all,
no other process visible), a new session, no capabilities, an environment with nothing of the grader's in
it, limits on CPU time, file size and (where the kernel honours it) the number of processes, and, where
this user may create cgroups, a cgroup bounding the notebook's processes and total memory; without one,
the grader adds up the memory of the notebook's processes while it waits for an answer (`tree_memory`)
and stops the notebook above its bound.

Without bwrap or user namespaces (macOS, containers whose seccomp profile forbids them) the grader
refuses to grade unless the teacher asks for the weak mode (`--weak`): the child then runs in a session
of its own, with the same limits, but can read and write what the teacher can and use the network; its
scratch folder is a folder of its own on the teacher's disk, which the grader measures several times a
second and before it accepts each answer (`scratch_used`; every file is bounded by RLIMIT_FSIZE), stopping
the notebook above SCRATCH_MB or SCRATCH_FILES, and deletes with the notebook. /dev/shm is the machine's
own there, so the grader measures what appeared in it under the grader's user since the notebook's sandbox
started (`SharedMemoryFiles`; the weak mode grades one notebook at a time), stops the notebook above
SHM_MB or SCRATCH_FILES, and deletes those files with the notebook. Every
process it starts is killed when its notebook is done (its cgroup where one can be made; otherwise the
grader, a child subreaper, kills every process that was orphaned to it), and grades are written only
after that.
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

MEMORY_MB = 2048  # memory of one notebook's processes and its scratch and /dev/shm (MB)
MEMORY_FLOOR_MB = 768  # below this not even an honest notebook runs: the worker with torch takes about 0.4 GB
SCRATCH_MB = 128  # the scratch folder: a tmpfs of this size (in the sandbox)
SHM_MB = 64  # /dev/shm: a tmpfs of this size (in the sandbox)
ADDRESS_SPACE = 8  # each process's address space is bounded at this many times the memory (a backstop only)
PROCESSES = 32  # processes per notebook (the cgroup's pids.max; RLIMIT_NPROC where the kernel applies it)
FILE_MB = 64  # largest file the child may write
SCRATCH_FILES = 10_000  # files and folders the scratch folder may hold in the weak mode (counted by the grader)
MESSAGE_MB = 16  # largest answer the grader reads from the child
MEASURE_SECONDS = 0.2  # how often the grader measures a notebook's memory (no cgroup) and weak scratch folder
ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the attention_book package
CHECKS = ROOT / "attention_book" / "course" / "checks"  # the references: never visible to a submission
# RLIMIT_NPROC is set by the worker inside its user namespace, where it counts that namespace's processes
# only; set before, it would count every process of the teacher's (and root is never bound by it).
WORKER = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from attention_book.course.worker import main; main(%s)"
ENVIRONMENT = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
_PROBED: dict[str, str | None] = {}


class SandboxEnded(Exception):
    """The child stopped answering: it exited, was killed, ran out of time or broke the protocol."""


class ExerciseEnded(Exception):
    """The process of one exercise ended (exited, killed) while the notebook's sandbox lives on."""


PACKAGE_FILES = {".py", ".pyc", ".json", ".pt", ".h5", ".css", ".js", ".typed"}  # what the package holds


def allowed_paths() -> list[Path]:
    """The folders the child may read: the Python installation's standard library and the installed
    packages (site-packages). Never the working directory, PYTHONPATH's entries or any other folder on
    sys.path: this package, when it is installed from a checkout (editable), is `package_files`."""
    import site
    import sysconfig

    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix,
                                     "installed_base": sys.base_prefix, "installed_platbase": sys.base_exec_prefix})
    here = sysconfig.get_paths()
    candidates = [base["stdlib"], base["platstdlib"], here["purelib"], here["platlib"], *site.getsitepackages()]
    paths: list[Path] = []
    for path in sorted({Path(p).resolve() for p in candidates if p and Path(p).is_dir()}, key=lambda p: len(p.parts)):
        if path == Path("/") or any(path.is_relative_to(kept) for kept in paths):
            continue
        paths.append(path)
    return paths


def interpreter_files() -> list[tuple[Path, Path]]:
    """(source, place in the child) of the files that start Python: the interpreter, its shared library
    and a virtual environment's pyvenv.cfg."""
    import sysconfig

    executable = Path(sys.executable)
    files = [(executable.resolve(), executable.resolve()), (executable.resolve(), executable)]
    libraries = {sysconfig.get_config_var(name) or "" for name in ("LDLIBRARY", "INSTSONAME")} - {""}
    for folder in {sysconfig.get_config_var("LIBDIR"), str(Path(sys.base_prefix) / "lib")}:
        for library in libraries:
            if folder and (Path(folder) / library).exists():
                files.append(((Path(folder) / library).resolve(), Path(folder) / library))
    config = Path(sys.prefix) / "pyvenv.cfg"
    if config.exists():
        files.append((config.resolve(), config))
    return [(source, place) for source, place in files if not place.is_relative_to("/usr")]


def package_files() -> list[Path]:
    """This package's own files (code, its bytecode and data), one by one, without the grader's checks:
    what the child needs of a checkout the package is installed from, and nothing else of it."""
    package = ROOT / "attention_book"
    found = []
    for parent, folders, files in os.walk(package):
        here = Path(parent)
        folders[:] = [f for f in folders if (here / f).resolve() != CHECKS.resolve() and not f.startswith(".")]
        found += [here / f for f in files if Path(f).suffix in PACKAGE_FILES and not (here / f).is_symlink()]
    return sorted(found)


def bwrap_prefix(scratch: Path, hidden: tuple[Path, ...] = ()) -> list[str]:
    """bubblewrap's command line: a root built from the allow-list, `scratch` a size-bounded tmpfs and
    the only writable place, /dev/shm bounded too, namespaces, no capabilities. `hidden` folders inside an
    allowed path are covered by empty ones."""
    args = ["bwrap", "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--clearenv", "--proc", "/proc", "--dev", "/dev", "--size", str(SHM_MB << 20), "--tmpfs", "/dev/shm",
            "--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / top
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    allowed = [p for p in allowed_paths() if not p.is_relative_to("/usr")]
    for path in allowed:
        args += ["--ro-bind", str(path), str(path)]
    for source, place in interpreter_files():
        args += ["--ro-bind", str(source), str(place)]
    if not any(ROOT.resolve().is_relative_to(p) for p in [Path("/usr"), *allowed]):
        for path in package_files():
            args += ["--ro-bind", str(path), str(path)]
    for path in {CHECKS.resolve(), *(p.resolve() for p in hidden)}:
        if path.is_dir() and any(path.is_relative_to(p) for p in [Path("/usr"), *allowed]):
            args += ["--tmpfs", str(path)]
    args += ["--size", str(SCRATCH_MB << 20), "--tmpfs", str(scratch), "--chdir", str(scratch)]
    for name, value in {**ENVIRONMENT, "HOME": str(scratch), "TMPDIR": str(scratch)}.items():
        args += ["--setenv", name, value]
    return args


def isolation() -> str | None:
    """None when the allow-list sandbox works here, else why not (probed once)."""
    if "why" not in _PROBED:
        why = None
        if not sys.platform.startswith("linux"):
            why = f"{sys.platform} has no bubblewrap"
        elif shutil.which("bwrap") is None:
            why = "bwrap is not installed (make bwrap, or apt-get install bubblewrap)"
        else:
            with tempfile.TemporaryDirectory() as folder:
                probe = subprocess.run([*bwrap_prefix(Path(folder)), sys.executable, "-I", "-c", "pass"],
                                       capture_output=True, text=True)
            if probe.returncode != 0:
                why = f"bwrap failed: {probe.stderr.strip()[:200]}"
        _PROBED["why"] = why
    return _PROBED["why"]


def describe_isolation(weak: bool = False) -> str:
    """One line for the grading log: what the sandbox isolates on this machine."""
    bound = "processes and memory bounded by a cgroup" if Cgroup.available() else \
        "memory bounded per notebook by the grader's count of its processes' memory (no cgroup can be made here: " \
        "the process count is bounded only for non-root users)"
    if not weak and isolation() is None:
        return (f"sandbox: allow-list root (Python, packages, scratch folder of {SCRATCH_MB} MB; nothing else readable, "
                "only the scratch folder and /dev/shm writable), no network, no Unix sockets of the host, own PIDs, "
                f"no capabilities, no program can start; {bound}; time limits per exercise and notebook")
    why = "asked for with --weak" if isolation() is None else isolation()
    return (f"WEAK sandbox ({why}): own session, scratch folder, clean environment, time limits; {bound}; every "
            "process killed after its notebook; the network, the teacher's files and processes are NOT isolated")


class Cgroup:
    """A cgroup for one notebook (v2, or v1's pids and memory controllers) where this user may make one."""

    V2 = Path("/sys/fs/cgroup")
    V1 = {"pids": Path("/sys/fs/cgroup/pids"), "memory": Path("/sys/fs/cgroup/memory")}
    _count = 0

    @classmethod
    def _own(cls, controller: str | None) -> Path | None:
        """This process's cgroup folder of `controller` (None: the v2 hierarchy)."""
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            if (controller is None and names == "") or (controller in names.split(",")):
                base = cls.V2 if controller is None else cls.V1[controller]
                return base / path.lstrip("/")
        return None

    @classmethod
    def available(cls) -> bool:
        if "cgroup" not in _PROBED:
            try:
                probe = cls(MEMORY_MB)
                probe.close()
                _PROBED["cgroup"] = "yes"
            except OSError:
                _PROBED["cgroup"] = None
        return _PROBED["cgroup"] is not None

    def __init__(self, memory_mb: int, processes: int = PROCESSES):
        Cgroup._count += 1
        name = f"attention-book-{os.getpid()}-{Cgroup._count}"
        self.folders: list[Path] = []
        try:
            v2 = self._own(None) if (self.V2 / "cgroup.controllers").exists() else None
            if v2 is not None and {"pids", "memory"} <= set((v2 / "cgroup.subtree_control").read_text().split()):
                folder = v2 / name
                folder.mkdir()
                self.folders.append(folder)
                (folder / "pids.max").write_text(str(processes))
                (folder / "memory.max").write_text(str(memory_mb << 20))
                (folder / "memory.swap.max").write_text("0")
                return
            for controller, setting, value in (("pids", "pids.max", processes),
                                               ("memory", "memory.limit_in_bytes", memory_mb << 20)):
                own = self._own(controller)
                if own is None or not own.is_dir():
                    raise OSError(f"no {controller} cgroup")
                folder = own / name
                folder.mkdir()
                self.folders.append(folder)
                (folder / setting).write_text(str(value))
        except (OSError, ValueError):
            self.close()
            raise OSError("no cgroup can be made here") from None

    def enter(self) -> None:
        """Move the calling process (a child before exec) into the cgroup."""
        for folder in self.folders:
            (folder / "cgroup.procs").write_text("0")

    def pids(self) -> set[int]:
        found = set()
        for folder in self.folders:
            try:
                found |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return found

    def close(self) -> None:
        """Kill every process in the cgroup, then remove it."""
        for _ in range(200):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
        for folder in reversed(self.folders):
            for _ in range(100):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
        self.folders = []


def become_subreaper() -> bool:
    """Make this process the reaper of every orphaned descendant (Linux), so the weak mode can kill
    processes that left their session; False where that is not possible."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER


def kill_children(keep: set[int] = frozenset()) -> None:
    """SIGKILL and reap every child of this process but `keep`, until none is left (weak mode: with
    `become_subreaper`, every orphaned descendant of a sandbox is such a child)."""
    me = str(os.getpid())
    for _ in range(1000):
        children = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in keep:
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if stat[stat.rindex(")") + 2:].split()[1] == me:
                children.append(int(entry))
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _limits(seconds: float, memory_mb: int, cgroup: "Cgroup | None"):
    def apply():
        import resource

        if cgroup is not None:
            cgroup.enter()
        space = (memory_mb * ADDRESS_SPACE) << 20  # torch reserves far more address space than it uses
        resource.setrlimit(resource.RLIMIT_AS, (space, space))
        file_mb = min(FILE_MB, SCRATCH_MB)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb << 20, file_mb << 20))
        cpu = int(seconds) + 5
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def scratch_used(folder: str, most_files: int = SCRATCH_FILES) -> tuple[int, int]:
    """(bytes, entries) of everything under `folder`, counting stopped past `most_files` entries
    (the weak mode's bound on its scratch folder, which is not a tmpfs there)."""
    used, entries, stack = 0, 0, [folder]
    while stack and entries <= most_files:
        try:
            with os.scandir(stack.pop()) as found:
                for entry in found:
                    entries += 1
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    # a file by its length (a sparse one as if whole), anything else by its blocks
                    used += info.st_size if entry.is_file(follow_symlinks=False) else info.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return used, entries


class SharedMemoryFiles:
    """The weak mode's bound on /dev/shm, a folder every process of the machine shares: the entries that
    appear there, owned by this user, after the snapshot taken when the notebook's sandbox starts (the weak
    mode grades one notebook at a time, so they are the notebook's, or of a program the teacher runs
    meanwhile that uses /dev/shm); measured as `scratch_used` measures the scratch folder, and deleted with
    the notebook."""

    def __init__(self, folder: str = "/dev/shm"):
        self.folder, self.uid = folder, os.getuid()
        self.before = {(name, ino) for name, ino, _ in self._entries()}

    def _entries(self) -> list[tuple[str, int, int]]:
        """(name, inode, owner) of every entry of the folder (none where it does not exist)."""
        found = []
        try:
            with os.scandir(self.folder) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    found.append((entry.name, info.st_ino, info.st_uid))
        except OSError:
            pass
        return found

    def new(self) -> list[str]:
        """The paths of the entries that appeared since the snapshot, owned by this user."""
        return [os.path.join(self.folder, name) for name, ino, owner in self._entries()
                if owner == self.uid and (name, ino) not in self.before]

    def used(self, most_files: int = SCRATCH_FILES) -> tuple[int, int]:
        """(bytes, entries) of the new entries and everything under them."""
        used, entries = 0, 0
        for path in self.new():
            entries += 1
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                inside, count = scratch_used(path, most_files - entries)
                used, entries = used + inside + info.st_blocks * 512, entries + count
            else:
                used += info.st_size if os.path.isfile(path) else info.st_blocks * 512
            if entries > most_files:
                break
        return used, entries

    def remove(self) -> None:
        """Delete the new entries."""
        for path in self.new():
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            except OSError:
                pass


def tree_memory(root: int) -> int:
    """Bytes of memory the process `root` and all its descendants use: the sum of their proportional set
    sizes (shared pages, such as torch's after a fork, counted once), or of their resident sizes where the
    kernel gives no PSS."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    tree, grew = {root}, True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    total = 0
    for pid in tree:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) << 10
                    break
        except (OSError, ValueError):
            try:
                total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, ValueError, IndexError):
                pass
    return total


class Sandbox:
    """One child process for one notebook (`renew` readies it for the next notebook of the same student,
    never another's): `exercise` runs a solution cell in a fresh process forked for
    that exercise (with the exercise's forbidden functions made to raise), `call` calls its function, and
    `finish` ends that process.

    `timeout` bounds the whole notebook (seconds); `hidden` are folders the child must not see even where
    they lie inside an allowed path; `weak` runs without bubblewrap (see the module docstring).
    """

    def __init__(self, timeout: float = 60, memory_mb: int = MEMORY_MB, hidden: tuple[Path, ...] = (),
                 weak: bool = False):
        if memory_mb < MEMORY_FLOOR_MB:
            raise ValueError(f"memory_mb={memory_mb} is below the floor of {MEMORY_FLOOR_MB} MB: the worker alone (Python "
                             "with torch and numpy) needs about 0.4 GB")
        self.deadline = self.notebook_deadline = time.monotonic() + timeout
        self.scratch = tempfile.mkdtemp(prefix="attention-book-grading-")
        self.weak, self.memory_mb, self.largest, self.spied, self.watched = weak, memory_mb, 0, {}, {}
        self.preloaded: set[str] = set()  # modules the worker has imported (such a sandbox is not renewed)
        self.shm = SharedMemoryFiles() if weak else None  # the weak mode's /dev/shm, before the notebook
        if not weak and isolation() is not None:
            raise RuntimeError(f"the sandbox cannot isolate submissions here ({isolation()}); grade with --weak to "
                               "accept a weaker sandbox")
        try:
            self.cgroup = Cgroup(memory_mb) if Cgroup.available() else None
        except OSError:
            self.cgroup = None
        if weak:  # a shell stands between the grader and the worker: os.getppid() is the shell
            prefix = ["sh", "-c", '"$@"; exit $?', "sh"]
            env = {**ENVIRONMENT, "HOME": self.scratch, "TMPDIR": self.scratch}
        else:
            prefix, env = bwrap_prefix(Path(self.scratch), hidden), {}
        processes = None if weak or os.getuid() == 0 else PROCESSES
        self.process = subprocess.Popen([*prefix, sys.executable, "-I", "-c", WORKER % processes], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=self.scratch, env=env,
                                        start_new_session=True, preexec_fn=_limits(timeout, memory_mb, self.cgroup))
        self.buffer = b""
        self.next_measure = 0.0  # when memory and the weak mode's scratch folder are measured next
        self.ended: str | None = None
        self.in_exercise = False
        # Without a cgroup the grader bounds the sum of the processes' memory itself (tree_memory); in the
        # sandbox the scratch folder and /dev/shm, tmpfs outside that sum, come out of the same budget.
        # The weak mode's /dev/shm (memory, measured apart) likewise.
        self.budget = None if self.cgroup is not None else (memory_mb - (SHM_MB if weak else SCRATCH_MB + SHM_MB)) << 20
        try:
            self._receive()  # {"ready": true, "sealed": whether no program can start}
        except SandboxEnded:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Kill every process of the child (its cgroup, or its process group) and remove its scratch folder
        (and, in the weak mode, what it left in /dev/shm)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        if self.cgroup is not None:
            self.cgroup.close()
        for stream in (self.process.stdin, self.process.stdout):
            stream.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self.shm is not None:
            self.shm.remove()

    def renew(self, timeout: float) -> bool:
        """Make this sandbox ready for the next notebook of the same student (never another student's):
        the worker kills every process the last notebook left and empties the scratch folder and /dev/shm
        (`worker.reset`), and the notebook's time starts again at `timeout` seconds. False, with the
        sandbox closed, where that cannot be done (it ended, the weak mode, the reset failed, or the worker
        preloaded TensorFlow, whose memory would count against the next notebook): the caller starts a
        fresh one."""
        if self.weak or self.ended or self.in_exercise or self.preloaded:
            self.close()  # a preloaded TensorFlow (about 0.5 GB) would count against the next notebook's memory
            return False
        self.deadline = self.notebook_deadline = time.monotonic() + timeout
        self.largest, self.spied, self.watched = 0, {}, {}
        try:
            answer = self._exchange({"reset": True})
        except SandboxEnded:
            answer = None
        if answer != {"reset": True}:
            self.close()
            return False
        return True

    def preload(self, modules: tuple[str, ...]) -> None:
        """Have the worker import `modules` (of `wire.PRELOADABLE`) once, before it forks the exercises that
        use them: a TensorFlow chapter's exercises then do not each import TensorFlow."""
        if unknown := [m for m in modules if m not in wire.PRELOADABLE]:
            raise ValueError(f"modules {unknown} cannot be preloaded: only {list(wire.PRELOADABLE)}")
        wanted = [m for m in wire.PRELOADABLE if m in modules and m not in self.preloaded]
        if not wanted or self.in_exercise:
            return
        answer = self._exchange({"preload": wanted})
        loaded = answer.get("preloaded") if isinstance(answer, dict) and set(answer) == {"preloaded"} else None
        if not isinstance(loaded, list) or not set(loaded) <= set(wanted):
            raise self._end("it answered out of turn (forged answers on the grader's channel)")
        self.preloaded |= set(wanted)  # asked once: a module that is not installed is not asked for again

    def exercise(self, source: str, function: str, forbidden: tuple[str, ...] = (), seconds: float | None = None) -> None:
        """Fork a process for one exercise, make `forbidden` raise in it, run the solution cell there; raises
        the submission's error as `SubmissionError`. `seconds` bounds the exercise (within the notebook's time)."""
        if self.in_exercise:
            self.finish()
        self.deadline = self.notebook_deadline if seconds is None else min(self.notebook_deadline,
                                                                           time.monotonic() + seconds)
        answer = self._exchange({"define": source, "function": function, "forbidden": list(forbidden)})
        self.in_exercise = True
        if "over" in answer:
            self.in_exercise = False
            raise ExerciseEnded(_status(answer["over"]))
        if "raised" in answer:
            raise SubmissionError(answer)
        if answer != {"defined": True}:
            raise self._end("it answered out of turn (forged answers on the grader's channel)")

    def finish(self) -> None:
        """End the current exercise's process (the notebook's sandbox stays for the next exercise)."""
        if not self.in_exercise or self.ended:
            return
        self.in_exercise = False
        answer = self._exchange({"done": True})
        if set(answer) != {"over"}:
            raise self._end("it answered out of turn (forged answers on the grader's channel)")

    def define(self, source: str, function: str) -> None:
        """A solution cell with nothing forbidden (an exercise without a time limit of its own)."""
        self.exercise(source, function)

    def call(self, *args, writes: tuple[int, ...] = (), spies: dict | None = None, watch: dict | None = None):
        """The student's function on `args`, run in the child; returns the decoded value or raises. The
        arguments at the positions `writes` (which the exercise asks the function to change in place) come
        back after the call and are copied into the tensors given here; no other argument is touched.
        `spies` {position: names} makes the child watch those arguments (`spy.spy_tensor`); what it saw is
        left in `self.spied` {position: [(kind, name)]}. `watch` {watcher name: positions} makes the child
        watch those arguments with `spy.WATCHERS[name]`; its reports are left in `self.watched` {name:
        report}, unread (the caller's watcher reads them); an answer without them ends the sandbox."""
        spies = {str(i): list(names) for i, names in (spies or {}).items()}
        watch = {str(name): [int(i) for i in positions] for name, positions in (watch or {}).items()}
        answer = self._exchange({"call": wire.encode(list(args)), "writes": list(writes), "spies": spies,
                                 "watch": watch})
        self.spied, self.watched = {}, {}
        if "value" in answer and watch and (not isinstance(answer.get("watched"), dict)
                                            or set(answer["watched"]) != set(watch)):
            raise self._end("it answered without the report of the watchers the check asked for")
        if set(answer) - {"written", "spied", "watched"} == {"value", "largest"} and \
                isinstance(answer["largest"], int):
            self.watched = dict(answer.get("watched", {}))
            self.largest = answer["largest"]  # the largest tensor the call made (elements)
            try:
                value = wire.decode(answer["value"])
                written = {int(i): wire.decode(v) for i, v in dict(answer.get("written", {})).items()}
                self.spied = {int(i): [(str(kind), str(name)) for kind, name in entries][:10_000]
                              for i, entries in dict(answer.get("spied", {})).items() if i in spies}
            except (ValueError, TypeError, RecursionError) as error:
                raise self._end(f"its answer is not a plain value ({type(error).__name__}: {str(error)[:100]})") from None
            _copy_back(args, written, writes)
            return value
        if set(answer) == {"raised", "message"} and isinstance(answer["raised"], str):
            raise SubmissionError(answer)
        if set(answer) == {"over"}:
            self.in_exercise = False
            raise ExerciseEnded(_status(answer["over"]))
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
            if time.monotonic() >= self.next_measure:  # five times a second, not on every message (a /proc scan)
                self.next_measure = time.monotonic() + MEASURE_SECONDS
                if self.budget is not None and tree_memory(self.process.pid) > self.budget:
                    raise self._end(f"it used more than the {self.memory_mb} MB of memory a notebook may use")
                self._check_scratch()
            if not select.select([stream], [], [], min(left, 0.2))[0]:
                continue
            chunk = os.read(stream, 1 << 20)
            if not chunk:
                raise self._end()
            self.buffer += chunk
            if len(self.buffer) > MESSAGE_MB << 20:
                raise self._end(f"its answer exceeds {MESSAGE_MB} MB")
        self._check_scratch()  # what the answer's code wrote, before the answer counts
        line, self.buffer = self.buffer.split(b"\n", 1)
        if self.buffer:  # the worker answers once per request and then waits: more is a forgery
            raise self._end("it answered out of turn (forged answers on the grader's channel)")
        try:
            answer = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser's stack
            raise self._end("it wrote something that is not an answer") from None
        if not isinstance(answer, dict):
            raise self._end("it wrote something that is not an answer")
        return answer

    def _check_scratch(self) -> None:
        """The weak mode's scratch folder, a plain folder on disk, and what it wrote in the machine's /dev/shm:
        stop the notebook above their bounds."""
        if not self.weak:
            return  # a tmpfs of SCRATCH_MB in the sandbox, and one of SHM_MB as its /dev/shm
        used, entries = scratch_used(self.scratch)
        if used > SCRATCH_MB << 20:
            raise self._end(f"it wrote more than the {SCRATCH_MB} MB its scratch folder may hold")
        if entries > SCRATCH_FILES:
            raise self._end(f"it made more than the {SCRATCH_FILES} files its scratch folder may hold")
        used, entries = self.shm.used()
        if used > SHM_MB << 20:
            raise self._end(f"it wrote more than the {SHM_MB} MB it may keep in /dev/shm")
        if entries > SCRATCH_FILES:
            raise self._end(f"it made more than the {SCRATCH_FILES} files it may keep in /dev/shm")

    def _end(self, why: str | None = None) -> SandboxEnded:
        """Stop the child and say why, once; every later call raises the same."""
        if self.ended is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            code = self.process.wait()
            if why is None:
                why = _status(code)
                if code in (128 + signal.SIGKILL, -signal.SIGKILL) and time.monotonic() < self.deadline:
                    why = "it was killed (by itself, or for exceeding the memory limit)"
            self.ended = f"the grading process of this notebook stopped: {why}"
        return SandboxEnded(self.ended)


def _copy_back(args: tuple, written: dict, writes: tuple[int, ...]) -> None:
    """Copy what the child's call left in the arguments `writes` into the grader's tensors, where it is a
    tensor of the same shape and dtype (anything else is left as it was: the check then says so)."""
    import torch

    for index, value in written.items():
        target = args[index] if index in writes and 0 <= index < len(args) else None
        if isinstance(target, torch.Tensor) and isinstance(value, torch.Tensor) and \
                value.shape == target.shape and value.dtype == target.dtype:
            with torch.no_grad():
                target.copy_(value)


def _status(code) -> str:
    """What an exit status says, in words."""
    if not isinstance(code, int):
        return "it ended"
    if code in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        return "it used up its CPU time"
    if code in (-signal.SIGKILL, 128 + signal.SIGKILL):
        return "it was killed (by itself, or for exceeding the memory limit)"
    if code < 0:
        try:
            return f"it was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"it was killed by signal {-code}"
    return f"it exited with status {code}"


class SubmissionError(Exception):
    """An exception the student's code raised in the child, by name and message."""

    def __init__(self, answer: dict):
        self.name, self.message = str(answer.get("raised"))[:100], str(answer.get("message"))[:2000]
        super().__init__(f"{self.name}: {self.message}")
