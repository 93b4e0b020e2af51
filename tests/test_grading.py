"""Sandboxed grading (issues 20 and 33): no submission decides its own grade and none can stop the others.

One class is graded once: the honest solutions, the untouched stubs and every cheat the issue names,
each as its own student. A cheat is the reference chapter with the solution cell of its first graded
exercise replaced: that exercise gets no marks, with a message saying what happened, the chapter's other
exercises are still graded (unless the cheat used up the notebook's time), and so is every other student.
"""

import csv
import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
import torch

from attention_book.course import checks, grading, sandbox, wire
from attention_book.course.__main__ import main as course_command
from attention_book.course.notebooks import make_student_notebooks
from conftest import NOTEBOOKS

CHAPTER = "05_causal_attention.ipynb"
NAMESPACES = sandbox.isolation() is None
WRONG = "    return torch.zeros(T, S, dtype=torch.bool)\n"  # what a cheat's function returns when it returns

# Each cheat is the student's whole solution cell.
CHEATS = {
    "loops_forever": "def offset_causal_mask_by_hand(T, S):\n    while True:\n        pass\n",
    "exhausts_memory": "def offset_causal_mask_by_hand(T, S):\n    hoard = []\n    while True:\n"
                       "        hoard.append(bytearray(1 << 26))\n",
    "exits": "import sys\nsys.exit(0)\n\n\ndef offset_causal_mask_by_hand(T, S):\n    sys.exit(0)\n",
    "exits_hard": "import os\n\n\ndef offset_causal_mask_by_hand(T, S):\n    os._exit(0)\n",
    "kills_itself": "import os\nimport signal\n\n\ndef offset_causal_mask_by_hand(T, S):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    "kills_parent": "import os\nimport signal\n\nos.kill(os.getppid(), signal.SIGKILL)\n\n\n"
                    "def offset_causal_mask_by_hand(T, S):\n    os.kill(os.getppid(), signal.SIGKILL)\n",
    # the old grader's hole: one line into the file that ATTENTION_BOOK_GRADES names, and forged answers
    "forges_records": "import json\nimport os\n\nimport torch\n\n"
                      "record = {'exercise': 'ch5.offset_causal_mask', 'passed': True, 'message': 'passed on 20 random cases'}\n"
                      "if os.environ.get('ATTENTION_BOOK_GRADES'):\n"
                      "    open(os.environ['ATTENTION_BOOK_GRADES'], 'a').write(json.dumps(record) + '\\n')\n"
                      "print(json.dumps(record))\n"
                      "for fd in range(3, 32):\n    try:\n"
                      "        os.write(fd, b'{\"defined\": true}\\n{\"value\": true}\\n')\n    except OSError:\n        pass\n\n\n"
                      "def offset_causal_mask_by_hand(T, S):\n    return {'passed': True}\n",
    "monkeypatches_checks": "import numpy\nimport numpy.testing\nimport torch\nimport torch.testing\n\n"
                            "from attention_book.course import checks\n\n"
                            "torch.testing.assert_close = lambda *a, **k: None\n"
                            "numpy.testing.assert_allclose = lambda *a, **k: None\n"
                            "torch.equal = torch.allclose = lambda *a, **k: True\n"
                            "checks.CHECKS['ch5.offset_causal_mask'] = checks.Check(lambda f, seed: None, 'offset_causal_mask_by_hand')\n"
                            "checks.evaluate = lambda *a, **k: checks.Result(a[0], True, 'passed')\n\n\n"
                            "def offset_causal_mask_by_hand(T, S):\n" + WRONG,
    "uses_the_network": "import socket\n\nimport torch\n\n\ndef offset_causal_mask_by_hand(T, S):\n"
                        "    socket.create_connection(('127.0.0.1', PORT), timeout=2).sendall(b'leak')\n"
                        "    return torch.ones(T, S, dtype=torch.bool).tril(S - T)\n",
    "reads_the_grades": "import torch\n\nopen(SCORES).read()\n\n\ndef offset_causal_mask_by_hand(T, S):\n"
                        "    return torch.ones(T, S, dtype=torch.bool).tril(S - T)\n",
    # issue 33: the package's own version of what the exercise builds
    "calls_the_reference": "from attention_book.causal import causal_mask\n\n\n"
                           "def offset_causal_mask_by_hand(T, S):\n    return causal_mask(T, S)\n",
    # issue 33: a solution found on disk (an unhidden built book under /tmp)
    "copies_from_disk": "found = {}\nexec(open(__BOOK__).read(), found)\n\n\n"
                        "def offset_causal_mask_by_hand(T, S):\n    return found['offset_causal_mask_by_hand'](T, S)\n",
    # issue 33: a line of JSON nested 100,000 deep on the grader's pipe, then nothing
    "nests_json": "import os\n\nline = b'[' * 100_000 + b']' * 100_000 + b'\\n'\nfor fd in range(3, 32):\n"
                  "    try:\n        os.write(fd, line)\n    except OSError:\n        pass\nos._exit(0)\n\n\n"
                  "def offset_causal_mask_by_hand(T, S):\n" + WRONG,
    # issue 33: a Unix socket of the host (Docker's, D-Bus's, ssh-agent's on a teacher's machine)
    "uses_a_unix_socket": "import socket\n\nimport torch\n\n\ndef offset_causal_mask_by_hand(T, S):\n"
                          "    client = socket.socket(socket.AF_UNIX)\n    client.connect(__SOCKET__)\n"
                          "    client.sendall(b'leak')\n    return torch.ones(T, S, dtype=torch.bool).tril(S - T)\n",
    # issue 33: a file outside the scratch folder, its text returned as feedback
    "reads_outside": "def offset_causal_mask_by_hand(T, S):\n    raise ValueError(open(__NOTES__).read())\n",
}
if NAMESPACES:  # without a PID namespace this would kill every process of the user, the tests included
    CHEATS["kills_everything"] = "import os\nimport signal\n\nos.kill(-1, signal.SIGKILL)\n\n\n" \
                                 "def offset_causal_mask_by_hand(T, S):\n" + WRONG

EXPECTED = {  # student -> (passed, message pattern)
    "honest": ("True", r"passed on 20 random cases"),
    "stub": ("False", r"not implemented yet\. Hint: query i sits at position"),
    "loops_forever": ("False", r"stopped: time limit reached"),
    "exhausts_memory": ("False", r"MemoryError|stopped: it was killed"),
    "exits": ("False", r"your solution cell raised SystemExit"),
    "exits_hard": ("False", r"stopped: it exited with status 0"),
    "kills_itself": ("False", r"stopped: it was killed"),
    "kills_parent": ("False", r"stopped: it was killed|should be a tensor of shape \(\d+, \d+\), yours is None"),  # its parent: a shell
    "forges_records": ("False", r"stopped: it answered out of turn"),
    "monkeypatches_checks": ("False", r"query \d+ is position \d+ and must see key \d+|"
                                      r"your solution cell raised (AttributeError|ImportError|ModuleNotFoundError)"),
    "uses_the_network": ("False", r"your function raised (OSError|ConnectionRefusedError|PermissionError)"),
    "reads_the_grades": ("False", r"your solution cell raised (PermissionError|FileNotFoundError)"),
    "kills_everything": ("False", r"stopped: it (was killed|exited)|raised (ProcessLookupError|NameError)"),  # nothing else to kill
    "calls_the_reference": ("False", r"raised ForbiddenCall: this exercise asks you to write causal_mask yourself"),
    "copies_from_disk": ("False", r"your solution cell raised FileNotFoundError"),
    "nests_json": ("False", r"stopped: it (wrote something that is not an answer|answered out of turn)"),
    "uses_a_unix_socket": ("False", r"your function raised (FileNotFoundError|ConnectionRefusedError|PermissionError)"),
    "reads_outside": ("False", r"your function raised FileNotFoundError"),
    "links_a_notebook": ("False", r"refused: .* is a symbolic link; submit the notebook itself"),
    "links_a_folder": ("False", r"refused: .* is a symbolic link; submit the notebook itself"),
}
SECRET = "the teacher's private notes"
REFUSED = {"links_a_notebook", "links_a_folder"}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the class; returns (results by (student, exercise), scores by student, the file a forger
    wrote to, the bytes the network listener received)."""
    root = tmp_path_factory.mktemp("class")
    teacher = next(p for p in NOTEBOOKS if p.name == CHAPTER)
    student = make_student_notebooks(teacher.parent, root / "student")
    stub = next(p for p in student if p.name == CHAPTER)
    submissions, grades = root / "submissions", root / "grades"
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    forged = root / "grades.jsonl"
    book, notes = root / "built_book" / "solutions.py", root / "teacher_notes.txt"
    book.parent.mkdir()
    book.write_text("import torch\n\n\ndef offset_causal_mask_by_hand(T, S):\n    return torch.ones(T, S, dtype=torch.bool).tril(S - T)\n")
    notes.write_text(SECRET)
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(root / "agent.sock"))
    unix.listen()
    unix.settimeout(0.1)
    os.environ["ATTENTION_BOOK_GRADES"] = str(forged)  # as the old grader set it: a cheat looks for it
    for name, source in {"honest": None, "stub": None, **CHEATS}.items():
        notebook = nbformat.read(stub if name == "stub" else teacher, as_version=4)
        if source is not None:
            for name_, value in {"PORT": str(listener.getsockname()[1]), "SCORES": repr(str(grades / "scores.csv")),
                                 "__BOOK__": repr(str(book)), "__NOTES__": repr(str(notes)),
                                 "__SOCKET__": repr(str(root / "agent.sock"))}.items():
                source = source.replace(name_, value)
            cell = next(c for c in notebook.cells if c.cell_type == "code" and "def offset_causal_mask_by_hand(" in c.source)
            cell.source = source
        (submissions / name).mkdir(parents=True)
        nbformat.write(notebook, submissions / name / CHAPTER)
    (submissions / "links_a_notebook").mkdir()
    (submissions / "links_a_notebook" / CHAPTER).symlink_to(teacher)  # the teacher's chapter, solutions and all
    (submissions / "links_a_folder").symlink_to(submissions / "honest", target_is_directory=True)
    try:
        course_command(["grade", str(submissions), str(grades), "--timeout", "60", "--exercise-timeout", "6",
                        "--memory", "1024",
                        *([] if NAMESPACES else ["--weak"])])
    finally:
        del os.environ["ATTENTION_BOOK_GRADES"]
    received = b""
    for server in (listener, unix):
        try:
            received += server.accept()[0].recv(16)
        except OSError:
            pass
        server.close()
    with open(grades / "results.csv") as file:
        results = {(row["student"], row["exercise"]): row for row in csv.DictReader(file)}
    with open(grades / "scores.csv") as file:
        scores = {row["student"]: (row["passed"], row["total"]) for row in csv.DictReader(file)}
    return results, scores, forged, received


EXERCISES = ["ch5.offset_causal_mask", "ch5.padded_causal_mask", "ch5.attention_dropout", "ch5.first_leak",
             "ch5.packed_mask"]  # chapter 5's graded exercises


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_each_submission_gets_what_it_earned_with_the_reason(graded, student):
    if student == "kills_everything" and not NAMESPACES:
        pytest.skip("needs a PID namespace (unshare)")
    if student in ("uses_the_network", "reads_the_grades", "uses_a_unix_socket", "reads_outside", "copies_from_disk") \
            and not NAMESPACES:
        pytest.skip("network and file isolation need the allow-list sandbox (bubblewrap)")
    results, scores, _, _ = graded
    passed, message = EXPECTED[student]
    first = results[(student, "ch5.offset_causal_mask")]
    assert first["passed"] == passed, first
    assert re.search(message, first["message"]), first["message"]
    others = [results[(student, name)] for name in EXERCISES[1:]]
    if student in REFUSED:  # nothing of it is read
        assert all(re.search(message, r["message"]) for r in others)
        assert scores[student] == ("0", str(len(EXERCISES)))
    elif student == "stub":
        assert all(r["message"].startswith("not implemented yet. Hint:") for r in others)
        assert scores[student] == ("0", str(len(EXERCISES)))
    else:  # the other exercises, honest, are graded as usual
        assert all(r["passed"] == "True" for r in others), others
        assert scores[student] == (str(len(EXERCISES) - (passed != "True")), str(len(EXERCISES)))


def test_without_namespaces_the_worker_is_still_not_the_graders_child(monkeypatch):
    with sandbox.Sandbox(timeout=20, weak=True) as child:
        child.define("import os\n\n\ndef parent():\n    return os.getppid()\n", "parent")
        assert child.call() not in (os.getpid(), 0)


WRITER = ("import os\n\n\ndef write(files, mb):\n    for i in range(files):\n"
          "        with open(f'big{i}', 'wb') as f:\n            f.write(b'x' * (mb << 20))\n"
          "            f.flush()\n            os.fsync(f.fileno())\n    return os.getcwd()\n")


def test_weak_mode_bounds_the_scratch_folder(monkeypatch):
    """--weak: the scratch folder is a plain folder on disk, so the grader measures it. Files adding up past
    SCRATCH_MB stop the notebook with the reason, and the folder is deleted with it."""
    monkeypatch.setattr(sandbox, "SCRATCH_MB", 8)
    with sandbox.Sandbox(timeout=30, weak=True) as child:
        scratch = child.scratch
        child.define(WRITER, "write")
        assert child.call(1, 1) == scratch  # 1 MB: within the bound, the answer counts
        with pytest.raises(sandbox.SandboxEnded, match="more than the 8 MB its scratch folder may hold"):
            child.call(4, 3)  # 12 MB in files of 3 MB: each within RLIMIT_FSIZE, together past the bound
    assert not os.path.exists(scratch)


def test_weak_mode_refuses_one_file_larger_than_the_scratch_folder(monkeypatch):
    """One large file: RLIMIT_FSIZE (the scratch folder's size) makes the write fail inside the submission,
    the file stops at the bound."""
    monkeypatch.setattr(sandbox, "SCRATCH_MB", 8)
    source = ("import os\n\n\ndef write(mb):\n    try:\n        with open('big', 'wb') as f:\n"
              "            f.write(b'x' * (mb << 20))\n    except OSError as error:\n"
              "        return [str(error), os.path.getsize('big')]\n    return ['written', os.path.getsize('big')]\n")
    with sandbox.Sandbox(timeout=30, weak=True) as child:
        child.define(source, "write")
        assert child.call(7) == ["written", 7 << 20]
        assert child.call(9) == ["[Errno 27] File too large", 8 << 20]


def test_weak_mode_bounds_the_number_of_scratch_files(monkeypatch):
    monkeypatch.setattr(sandbox, "SCRATCH_FILES", 50)
    with sandbox.Sandbox(timeout=30, weak=True) as child:
        child.define("def many():\n    for i in range(100):\n        open(f'f{i}', 'w').close()\n", "many")
        with pytest.raises(sandbox.SandboxEnded, match="more than the 50 files"):
            child.call()


SHM_WRITER = ("import os\n\n\ndef write(files, mb):\n    for i in range(files):\n"
              "        with open(f'/dev/shm/attention-book-test-{os.getpid()}-{i}', 'wb') as f:\n"
              "            f.write(b'x' * (mb << 20))\n    return sorted(os.listdir('/dev/shm'))\n")


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_weak_mode_bounds_dev_shm_and_empties_it(monkeypatch):
    """--weak (issue 47): /dev/shm is the machine's, so the grader measures what appeared there under its
    user since the notebook started; files adding up past SHM_MB stop the notebook with the reason, and
    what it wrote there is deleted with it (what was there before stays)."""
    monkeypatch.setattr(sandbox, "SHM_MB", 8)
    before = tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="attention-book-before-")
    try:
        with sandbox.Sandbox(timeout=30, weak=True) as child:
            child.define(SHM_WRITER, "write")
            listed = child.call(1, 1)  # 1 MB: within the bound, the answer counts
            written = [n for n in listed if n.startswith("attention-book-test-")]
            assert len(written) == 1 and os.path.basename(before.name) in listed
            with pytest.raises(sandbox.SandboxEnded, match="more than the 8 MB it may keep in /dev/shm"):
                child.call(4, 3)  # 12 MB in files of 3 MB: together past the bound
        left = os.listdir("/dev/shm")
        assert not [n for n in left if n.startswith(written[0].rsplit("-", 1)[0])], left
        assert os.path.exists(before.name)
    finally:
        before.close()


def test_the_worker_watches_what_the_check_asks_and_a_reply_without_its_report_ends_the_sandbox():
    """Issue 41: `watch` makes the worker run the check's watcher (spy.WATCHERS) on those arguments around
    the call and send its report; a reply without it (the student's code patched the worker's reply) is
    refused, so a report cannot be dropped, only forged by code aimed at the grader's internals."""
    honest = "def attend(q, k, v):\n    return (q @ k.T).softmax(-1) @ v\n"
    dropping = ("import attention_book.course.worker as worker\n\nreply = worker._answer\n"
                "worker._answer = lambda channel, message: reply(channel, {key: value for key, value in "
                "message.items() if key != 'watched'})\n\n\n" + honest)
    q, k, v = torch.randn(3, 2), torch.randn(4, 2), torch.randn(4, 2)
    with sandbox.Sandbox(timeout=60, weak=not NAMESPACES) as child:
        child.define(honest, "attend")
        child.call(q, k, v, watch={"copies": [1, 2]})
        assert child.watched == {"copies": {"copies": [], "used": [0, 1], "reads": [[0, 1], [1, 1]]}}
        child.define("def attend(q, k, v):\n    return k.repeat(1, 2)\n", "attend")
        child.call(q, k, v, watch={"copies": [1, 2]})
        assert child.watched == {"copies": {"copies": [["repeat", [4, 4], 8]], "used": [], "reads": []}}
        child.define(dropping, "attend")
        with pytest.raises(sandbox.SandboxEnded, match="without the report of the watchers"):
            child.call(q, k, v, watch={"copies": [1, 2]})


def test_arguments_an_exercise_writes_in_place_come_back_and_no_others():
    """A cache's buffers written in place (ch7.cached_step's `writes`): what the call left in the named
    arguments is copied into the grader's tensors; the other arguments stay the grader's own."""
    source = "def step(new, buffer, other):\n    buffer[0] = new\n    other.zero_()\n    return 1\n"
    new, buffer, other = torch.ones(3), torch.zeros(2, 3), torch.ones(4)
    with sandbox.Sandbox(timeout=30, weak=not NAMESPACES) as child:
        child.define(source, "step")
        assert child.call(new, buffer, other) == 1 and buffer.sum() == 0  # nothing asked back
        assert child.call(new, buffer, other, writes=(1,)) == 1
    assert torch.equal(buffer, torch.stack([torch.ones(3), torch.zeros(3)])) and torch.equal(other, torch.ones(4))


def sandbox_verdicts(sources, function: str, check: str) -> list:
    """Each solution source graded by `check` in a sandbox of its own, the worker running the student's
    function (and any watcher the check asks for), as `grade` does."""
    verdicts = []
    for source in sources:
        with sandbox.Sandbox(timeout=60, weak=not NAMESPACES) as child:
            child.exercise(source, function, checks.CHECKS[check].forbidden)
            verdicts.append(checks.evaluate(check, None, seed=3, call=grading._SandboxCall(child)))
    return verdicts


def test_the_method_the_spy_sees_is_graded_in_the_sandbox_too():
    """ch1.embed asks for a one-hot product: its check watches the table (`spy.spy_tensor`); in the
    sandbox the worker watches it and sends the log back, so the product passes and indexing fails there as
    in the kernel (before, the sandbox saw a plain tensor and failed the honest product)."""
    product = ("import torch\n\n\ndef embed_by_hand(ids, table):\n"
               "    one_hot = (ids[:, None] == torch.arange(table.shape[0])).to(table.dtype)\n    return one_hot @ table\n")
    indexing = "def embed_by_hand(ids, table):\n    return table[ids]\n"
    verdicts = sandbox_verdicts((product, indexing), "embed_by_hand", "ch1.embed")
    assert verdicts[0].passed, verdicts[0].message
    assert not verdicts[1].passed and verdicts[1].message.startswith("right rows, but read by indexing")


def test_the_latents_broadcast_over_the_heads_are_seen_in_the_sandbox_too():
    """ch8.absorbed_decode asks for the heads folded into the query rows: a (B, H, 1, d_c) query times the
    (B, 1, S, d_c) latents gives the right values, but torch.matmul copies the latents per head, and a loop
    over the heads copies nothing but reads the latents once per head. The worker's watcher
    (`spy.KeyValueCopies`) sees the copy and counts how much of the latents each product reads, so the
    sandbox refuses both, and passes the fold and a loop over the batch (each sequence's slice read once)."""
    head = ("import math\n\nimport torch\n\n\ndef absorbed_decode(q_c, q_r, c, k_r, w_uk, w_uv):\n"
            "    q_lat = torch.einsum('bhtd,hdc->bhtc', q_c, w_uk)\n")
    tail = ("    w = torch.softmax(s / math.sqrt(q_c.shape[-1] + q_r.shape[-1]), -1)\n"
            "    return torch.einsum('bhtc,hdc->bhtd', (w @ c).reshape(*q_c.shape[:2], 1, -1), w_uv)\n")
    folded = head + ("    s = q_lat.flatten(1, 2)[:, None] @ c.mT + q_r.flatten(1, 2)[:, None] @ k_r.mT\n") + tail
    broadcast = head + "    s = q_lat @ c.mT + q_r @ k_r.mT\n" + tail
    per_head = head + ("    s = torch.stack([q_lat[:, h] @ c[:, 0].mT + q_r[:, h] @ k_r[:, 0].mT\n"
                       "                     for h in range(q_c.shape[1])], 1)\n"
                       "    w = torch.softmax(s / math.sqrt(q_c.shape[-1] + q_r.shape[-1]), -1)\n"
                       "    ctx = torch.stack([w[:, h] @ c[:, 0] for h in range(q_c.shape[1])], 1)\n"
                       "    return torch.einsum('bhtc,hdc->bhtd', ctx, w_uv)\n")
    per_sequence = head + ("    B, H = q_c.shape[:2]\n"
                           "    ctx = []\n"
                           "    for b in range(B):  # heads folded, one sequence at a time\n"
                           "        s = q_lat[b, :, 0] @ c[b, 0].mT + q_r[b, :, 0] @ k_r[b, 0].mT\n"
                           "        w = torch.softmax(s / math.sqrt(q_c.shape[-1] + q_r.shape[-1]), -1)\n"
                           "        ctx.append(w @ c[b, 0])\n"
                           "    return torch.einsum('bhc,hdc->bhd', torch.stack(ctx), w_uv)[:, :, None]\n")
    verdicts = sandbox_verdicts((folded, broadcast, per_head, per_sequence), "absorbed_decode",
                                "ch8.absorbed_decode")
    assert verdicts[0].passed, verdicts[0].message
    assert not verdicts[1].passed and "broadcast the latents" in verdicts[1].message, verdicts[1].message
    assert not verdicts[2].passed and "once per head" in verdicts[2].message, verdicts[2].message
    assert verdicts[3].passed, verdicts[3].message  # a loop over the batch reads each sequence's latents once


@pytest.mark.parametrize("shapes", [((2, 1, 3), (4, 3)), ((), (5,)), ((1,), (1,)), ((2, 3), (2, 1, 3)),
                                    ((7, 1, 1), (1, 4, 1), (1, 1, 2))])
def test_the_watchers_broadcast_rule_is_torchs(shapes):
    """`spy.broadcast_shape` (plain Python, so that no check imports torch.fx inside the import guard: it
    cost ch3.mqa half a minute) gives torch.broadcast_shapes' answer, and refuses what torch refuses."""
    from attention_book.course.spy import broadcast_shape

    assert broadcast_shape(*shapes) == tuple(torch.broadcast_shapes(*shapes))
    clash = (*broadcast_shape(*shapes)[:-1], 11)  # 11 against a last size other than 1 or 11
    if broadcast_shape(*shapes)[-1:] not in ((), (1,)):
        with pytest.raises(RuntimeError):
            torch.broadcast_shapes(*shapes, clash)
        with pytest.raises(ValueError, match="do not broadcast"):
            broadcast_shape(*shapes, clash)


def test_the_sandbox_preloads_tensorflow_once_for_the_exercises_that_ask_and_nothing_else():
    """`Check.imports`: the worker imports TensorFlow before it forks the exercise (each TensorFlow exercise
    imported it again, seconds each); such a sandbox is not renewed for the student's next notebook (about
    0.5 GB would count against it); a name outside `wire.PRELOADABLE` is refused. Every Keras exercise asks
    for it."""
    from attention_book.course.wire import PRELOADABLE

    source = "import sys\n\n\ndef loaded(name):\n    return name in sys.modules\n"
    with sandbox.Sandbox(timeout=120, weak=not NAMESPACES) as child:
        child.exercise(source, "loaded")
        assert child.call("tensorflow") is False and child.call("keras") is False
        child.finish()
        with pytest.raises(ValueError, match=r"\['http.server'\] cannot be preloaded"):
            child.preload(("tensorflow", "http.server"))
        child.preload(("keras", "tensorflow"))
        assert child.preloaded == {"tensorflow", "keras"}
        child.exercise(source, "loaded")
        assert child.call("tensorflow") is True and child.call("keras") is True
        child.finish()
        assert not child.renew(60)  # not reused: TensorFlow's memory would count against the next notebook
        assert child.process.poll() is not None  # closed: its processes killed
    assert set(PRELOADABLE) == {"tensorflow", "keras"}
    keras_checks = {name for name, entry in checks.CHECKS.items() if "keras" in " ".join(entry.forbidden)
                    or name.startswith("ch6.")}
    assert keras_checks and all(checks.CHECKS[name].imports == PRELOADABLE for name in keras_checks)


def test_the_chapters_in_place_cache_step_passes_in_the_sandbox_with_its_writes(monkeypatch):
    """ch7.cached_step writes the new key and value into the caller's buffers (arguments 3 and 4). With
    `writes=(3, 4)` in its entry the grader copies them back and the chapter's own solution passes in the
    sandbox; without, the check sees untouched buffers."""
    from attention_book.course.export import graded_exercises

    solution = next(e["solution"] for path in NOTEBOOKS for e in graded_exercises(nbformat.read(path, as_version=4))
                    if e["name"] == "ch7.cached_step")
    entry = checks.CHECKS["ch7.cached_step"]
    assert entry.writes == (3, 4), "the entry in checks/ch07.py names the buffers the exercise writes"
    with sandbox.Sandbox(timeout=60, weak=not NAMESPACES) as child:
        child.exercise(solution, entry.function, entry.forbidden)
        verdict = checks.evaluate("ch7.cached_step", None, seed=5, call=grading._SandboxCall(child, entry.writes))
        assert verdict.passed, verdict.message
        child.finish()
        child.exercise(solution, entry.function, entry.forbidden)
        verdict = checks.evaluate("ch7.cached_step", None, seed=5, call=grading._SandboxCall(child))
        assert not verdict.passed and "does not hold the new key and value" in verdict.message


def test_everyone_is_graded_and_nothing_leaks(graded):
    results, scores, forged, received = graded
    assert set(scores) == {"honest", "stub", *CHEATS, *REFUSED}, "a submission stopped the grading of others"
    assert not forged.exists(), "the sandbox saw the grader's environment"
    if NAMESPACES:
        assert received == b"", "a submission reached the network or a Unix socket of the host"
        assert not any(SECRET in row["message"] for row in results.values()), "a file outside the sandbox was read"


def test_a_notebook_without_the_function_or_readable_json_scores_zero(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nbformat.write(notebook, tmp_path / CHAPTER)
    (tmp_path / "07_kv_cache.ipynb").write_text("{not json")
    assert [r.message for r in grading.grade_notebook(tmp_path / CHAPTER)] == [
        f"no code cell defines {function}()" for function in ("offset_causal_mask_by_hand", "padded_causal_mask_by_hand",
                                                              "dropped_attention_by_hand", "first_leak",
                                                              "packed_mask_by_hand")]
    broken = grading.grade_notebook(tmp_path / "07_kv_cache.ipynb")
    assert broken and all(not r.passed and r.message.startswith("the notebook cannot be read") for r in broken)
    assert grading.chapter_exercises("notes.ipynb") == []


def test_the_sandbox_environment_holds_nothing_of_the_graders(monkeypatch):
    monkeypatch.setenv("TEACHER_SECRET", "s3cret")
    with sandbox.Sandbox(timeout=20) as child:
        child.define("import os\n\n\ndef environment():\n    return dict(os.environ), os.getcwd()\n", "environment")
        environment, cwd = child.call()
    assert "TEACHER_SECRET" not in environment and "ATTENTION_BOOK_GRADES" not in environment
    assert set(environment) <= {*sandbox.ENVIRONMENT, "HOME", "TMPDIR", "LC_CTYPE", "PWD", "SHLVL", "_"}  # the last three: sh's
    assert environment["HOME"] == cwd and cwd.startswith(("/tmp", os.environ.get("TMPDIR", "/tmp")))


def test_answers_are_json_values_never_pickles():
    values = [torch.tensor([[1.5, float("-inf")]]), torch.zeros(0, 3, dtype=torch.bool), {"cat": 1, 2: (3, 4.0)}]
    for value in values:
        back = wire.loads(wire.dumps(value))
        if isinstance(value, torch.Tensor):
            assert back.dtype == value.dtype and torch.equal(back, value)
        else:
            assert back == value
    with pytest.raises(TypeError, match="cannot send a builtin_function_or_method"):
        wire.encode(len)
    for forged in ({"__reduce__": "os.system"}, {"tensor": "object", "shape": [1], "data": [1]},
                   {"tensor": "float32", "shape": [2], "data": [1.0]}, {"array": "float64", "shape": [1], "data": ["rm"]}):
        with pytest.raises(ValueError):
            wire.decode(json.loads(json.dumps(forged)))


def test_isolation_is_described():
    line = sandbox.describe_isolation()
    if sys.platform.startswith("linux") and NAMESPACES:
        assert "no network" in line and "own PIDs" in line
    else:
        assert "NOT isolated" in line


@pytest.mark.skipif(sandbox.isolation() is not None, reason="needs user namespaces (Linux)")
def test_a_submission_can_write_only_its_scratch_folder(tmp_path):
    """The teacher's files do not exist for the child, the grader's own code is read-only; its scratch
    folder is writable. (Without this, one submission could rewrite the grader for everyone graded after it.)"""
    victim = tmp_path / "teachers_file.txt"
    victim.write_text("untouched")
    grader_code = Path(sandbox.__file__)
    source = (
        "import os\n\n\ndef attempt(paths):\n    results = []\n    for path in paths:\n        try:\n"
        "            with open(path, 'a') as file:\n                file.write('tampered')\n"
        "            results.append('written')\n        except OSError as error:\n"
        "            results.append(type(error).__name__ + ' ' + str(error.errno))\n    return results\n")
    with sandbox.Sandbox(timeout=20) as child:
        child.define(source, "attempt")
        results = child.call([str(victim), str(grader_code), "own_file.txt"])
    assert results[:2] == ["FileNotFoundError 2", "OSError 30"], results  # not there at all; EROFS: read-only
    assert results[2] == "written"
    assert victim.read_text() == "untouched" and "tampered" not in grader_code.read_text()



# Issue 33: every exercise's own reference, called instead of written, scores nothing.
CALLS_THE_REFERENCE = {
    "ch1.embed": "import torch.nn.functional as F\n\n\ndef embed_by_hand(ids, table):\n"
                 "    return F.one_hot(ids, table.shape[0]).to(table.dtype) @ table\n",
    "ch3.mask_to_sdpa": "from attention_book import mask_from_torch\n\n\ndef mask_to_sdpa(attn_mask, key_padding_mask):\n"
                        "    return mask_from_torch(attn_mask, key_padding_mask) == 0\n",
    "ch1.stable_softmax": "import torch\n\n\ndef stable_softmax_by_hand(s):\n    return torch.softmax(s, dim=-1)\n",
    "ch1.embedding_grad": "import torch\n\n\ndef embedding_grad_by_hand(ids, grad_out, V):\n"
                          "    table = torch.zeros(V, grad_out.shape[1], requires_grad=True)\n"
                          "    (table[ids] * grad_out).sum().backward()\n    return table.grad\n",
    "ch2.jacobian": "import torch\n\n\ndef softmax_jacobian_by_hand(s):\n"
                    "    return torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1), s)\n",
    "ch3.mqa": "import torch.nn.functional as F\n\n\ndef grouped_attention_by_hand(q, k, v):\n"
               "    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)\n",
    "ch2.additive": "import keras\nimport torch\n\n\ndef additive_scores_by_hand(q, k, W_1, W_2, v_a):\n"
                    "    layer = keras.layers.AdditiveAttention(use_scale=True)\n"
                    "    layer.build([(1, q.shape[0], W_1.shape[1]), (1, k.shape[0], W_2.shape[1])])\n"
                    "    layer.scale.assign(v_a.numpy())\n"
                    "    scores = layer._calculate_scores((q @ W_1)[None].numpy(), (k @ W_2)[None].numpy())\n"
                    "    return torch.as_tensor(keras.ops.convert_to_numpy(scores))[0]\n",
    "ch4.masked_loss": "import torch\nimport torch.nn.functional as F\n\n\ndef masked_loss_by_hand(logits, labels, lengths):\n"
                       "    real = torch.arange(labels.shape[1]) < lengths[:, None]\n"
                       "    return F.cross_entropy(logits[real], labels[real])\n",
    "ch9.merge_partials": "from attention_book.efficient import merge_partials as merge\n\n\n"
                          "def merge_partials(m_a, l_a, acc_a, m_b, l_b, acc_b):\n"
                          "    return merge(m_a, l_a, acc_a, m_b, l_b, acc_b)\n",
    "ch4.cross_attention": "import torch\n\n\ndef cross_attention_by_hand(x, key, value, weights, H):\n"
                           "    layer = torch.nn.MultiheadAttention(x.shape[-1], H, kdim=key.shape[-1], vdim=value.shape[-1],\n"
                           "                                        batch_first=True)\n"
                           "    layer.load_state_dict(weights)\n"
                           "    return layer(x, key, value, need_weights=False)[0].detach()\n",
    "ch4.padded_attention": "import torch\nimport torch.nn.functional as F\n\n\n"
                            "def padded_attention_by_hand(q, k, v, lengths):\n"
                            "    mask = torch.arange(k.shape[1]) < lengths[:, None]\n"
                            "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, :])\n",
    "ch5.offset_causal_mask": "import attention_book as ab\n\n\ndef offset_causal_mask_by_hand(T, S):\n"
                              "    return ab.causal_mask(T, S)\n",
    "ch5.padded_causal_mask": "import torch\n\nimport attention_book as ab\n\n\n"
                              "def padded_causal_mask_by_hand(lengths, T, left_padded):\n"
                              "    positions = torch.arange(T)\n"
                              "    real = positions >= T - lengths[:, None] if left_padded else positions < lengths[:, None]\n"
                              "    return ab.causal_mask(T) & real[:, None, :]\n",
    "ch5.attention_dropout": "import attention_book as ab\n\n\ndef dropped_attention_by_hand(q, k, v, keep, p):\n"
                             "    weights = ab.scaled_dot_product_attention(q, k, v, ab.causal_mask(q.shape[-2]))[1]\n"
                             "    return (weights * keep / (1 - p)) @ v\n",
    "ch5.packed_mask": "import attention_book as ab\n\n\ndef packed_mask_by_hand(document):\n"
                       "    return ab.causal_mask(len(document)) & (document[:, None] == document[None, :])\n",
    "ch6.torch_port": "from attention_book.keras_decoder import torch_from_keras_map\n\n\n"
                      "def torch_state_by_hand(weights):\n"
                      "    return torch_from_keras_map(weights)\n",
    "ch6.two_layers": "import numpy as np\n\nfrom attention_book.keras_decoder import attend, project, softmax\n\n\n"
                      "def two_layer_forward(datasets, tokens):\n"
                      "    def layer(x, g):\n"
                      "        def a(n, i):\n            return datasets[f'layers/{g}/{n}/vars/{i}']\n"
                      "        q, k, v = (project(x, a(n, 0), a(n, 1)) for n in ('query_dense', 'key_dense', 'value_dense'))\n"
                      "        return np.einsum('bhtk,hke->bte', attend(q, k, v), a('output_dense', 0)) + a('output_dense', 1)\n"
                      "    x = datasets['layers/embedding/vars/0'][tokens]\n"
                      "    x = layer(layer(x, 'multi_head_attention'), 'multi_head_attention_1')\n"
                      "    return softmax(x @ datasets['layers/dense/vars/0'] + datasets['layers/dense/vars/1'])\n",
    "ch8.ring_slots": "from attention_book.kv_cache import RingKVCache\n\n\ndef ring_slots(length, window):\n"
                      "    return RingKVCache(window).slot_positions(length)\n",
    "ch9.backward_skips": "from attention_book.causal import causal_mask\n\n\n"
                          "def backward_query_blocks(T, S, block_q, block_k, j):\n"
                          "    seen = causal_mask(T, S)\n    found = []\n"
                          "    for i in range(0, T, block_q):\n"
                          "        tile = seen[i:i + block_q, j:j + block_k]\n"
                          "        if tile.any():\n            found.append((i, not bool(tile.all())))\n"
                          "    return found\n",
    "ch9.score_gradient": "import torch\n\n\ndef score_gradient(z, v, d_o):\n"
                          "    x = z.clone().requires_grad_()\n"
                          "    return torch.autograd.grad(torch.softmax(x, -1) @ v, x, d_o)[0]\n",
    "ch10.rope_half": "import torch\n\nfrom attention_book.positions import apply_rope\n\n\ndef rope_half(x):\n"
                     "    d = x.shape[-1]\n    y = apply_rope(torch.stack([x[:, :d // 2], x[:, d // 2:]], -1).flatten(-2))\n"
                     "    return torch.cat([y[:, 0::2], y[:, 1::2]], -1)\n",
    "ch12.block": "from attention_book.decoder import DecoderBlock, DecoderConfig\n\n\n"
                  "def block_by_hand(x, w, num_heads):\n"
                  "    config = DecoderConfig(vocab_size=2, context_length=x.shape[1], embed_dim=x.shape[-1],\n"
                  "                           num_heads=num_heads, num_layers=1)\n"
                  "    block = DecoderBlock(config)\n    block.load_state_dict(w)\n    return block(x)\n",
    "ch12.lm_loss": "import torch.nn.functional as F\n\n\ndef lm_loss_by_hand(logits, tokens):\n"
                    "    return F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())\n",
    "ch12.filter_logits": "from attention_book.gpt import top_k_top_p\n\n\n"
                          "def filter_logits(logits, top_k=None, top_p=None):\n"
                          "    return top_k_top_p(logits, top_k, top_p)\n",
    "ch12.without_head": "import torch\n\nfrom attention_book.multihead import MultiHeadAttention\n\n\n"
                         "def without_head(x, w, num_heads, head):\n"
                         "    E, T = x.shape[-1], x.shape[1]\n    d = E // num_heads\n"
                         "    w = {name: t.clone() for name, t in w.items()}\n"
                         "    w['v_proj.weight'][head * d:(head + 1) * d] = 0  # the head's values: zero\n"
                         "    w['v_proj.bias'][head * d:(head + 1) * d] = 0\n"
                         "    mha = MultiHeadAttention(E, num_heads)\n    mha.load_state_dict(w)\n"
                         "    mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None]\n"
                         "    return mha(x, mask=mask)[0]\n",
    "ch12.lr_schedule": "from attention_book.gpt import GPTTrainConfig, learning_rate\n\n\n"
                        "def lr_schedule(peak, warmup, steps):\n"
                        "    config = GPTTrainConfig(steps=steps, warmup=warmup, learning_rate=peak)\n"
                        "    return [learning_rate(step, config) for step in range(steps)]\n",
    "ch10.alibi": "import torch\n\nfrom attention_book.positions import alibi_bias, alibi_slopes\n\n\n"
                  "def alibi_by_hand(T, H):\n"
                  "    return alibi_bias(torch.arange(T), torch.arange(T), alibi_slopes(H)).double()\n",
    "ch10.rope_interpolated": "from attention_book.positions import apply_rope\n\n\n"
                              "def rope_interpolated(x, scale):\n    return apply_rope(x, scale=scale)\n",
    "ch11.ov_positivity": "from attention_book.induction import copying_scores\n\n\n"
                          "def ov_positivity(circuit):\n    return copying_scores(circuit)[1]\n",
}


def _solution_calling(name: str, call: str) -> str:
    """The chapter's own solution of `name`, which also makes the forbidden call `call` first: it passes where
    the reference is allowed and must score zero where the grader forbids it."""
    from attention_book.course.export import graded_exercises

    for path in NOTEBOOKS:
        for exercise in graded_exercises(nbformat.read(path, as_version=4)):
            if exercise["name"] == name:
                function = exercise["function"]
                return (exercise["solution"] + f"\n\n_solution = {function}\n\n\n"
                        f"def {function}(*args):\n    {call}\n    return _solution(*args)\n")
    raise KeyError(name)


ATTEND = ("import numpy as np\n    import attention_book.keras_decoder as kd\n"
          "    kd.attend(*[np.zeros((1, 1, 1, 1))] * 3)")
CALLS_THE_REFERENCE.update({
    "ch5.first_leak": _solution_calling("ch5.first_leak", "import torch\n"
                                                          "    torch.testing.assert_close(torch.ones(1), torch.ones(1))"),
    "ch6.padded": _solution_calling("ch6.padded", ATTEND),
    "ch6.h5_generation": _solution_calling("ch6.h5_generation", "import attention_book.keras_decoder as kd\n"
                                                                "    kd.keras_weight_map(kd.KerasDecoderConfig())"),
    "ch6.two_layers": _solution_calling("ch6.two_layers", ATTEND),
    "ch7.cached_step": _solution_calling("ch7.cached_step", "import torch.nn.functional as F\n"
                                                            "    F.scaled_dot_product_attention(args[0], args[0], args[0])"),
    "ch7.cached_forward": _solution_calling("ch7.cached_forward", "import torch.nn.functional as F\n"
                                                              "    F.scaled_dot_product_attention(*[args[2]] * 3)"),
    "ch7.fit_bandwidth": _solution_calling("ch7.fit_bandwidth", "import numpy as np\n"
                                                                "    np.polyfit([0.0, 1.0, 2.0], [0.0, 1.0, 2.0], 1)"),
    "ch8.absorbed_decode": _solution_calling("ch8.absorbed_decode", "from attention_book.latent import LatentAttention\n"
                                                                    "    LatentAttention(8, 2, 4, 2).absorbed_weights()"),
    "ch8.gather_blocks": _solution_calling("ch8.gather_blocks", "import torch\n"
                                                                "    from attention_book.kv_cache import BlockPool, PagedKVCache\n"
                                                                "    cache = PagedKVCache(BlockPool(2, 2), 1)\n"
                                                                "    cache.append(torch.zeros(1, 1, 1, 1), torch.zeros(1, 1, 1, 1))\n"
                                                                "    cache.gather(cache.pool.keys)"),
    "ch8.verify_draft": _solution_calling("ch8.verify_draft", "from attention_book.kv_cache import KVCache\n"
                                                              "    KVCache(2).truncate(0)"),
})


def test_every_forbidden_reference_would_pass_if_allowed(monkeypatch):
    """Not vacuous: called in the kernel, without the sandbox and with nothing forbidden (the kernel's
    check() forbids the same as the grader), each of these answers passes its check (the method's measure
    aside: a reference that reads all of x at once is not "in blocks" either)."""
    assert set(CALLS_THE_REFERENCE) == {name for name, entry in checks.CHECKS.items() if entry.forbidden}
    for name, entry in list(checks.CHECKS.items()):
        monkeypatch.setitem(checks.CHECKS, name, dataclasses.replace(entry, largest=None, forbidden=()))
    for name, source in CALLS_THE_REFERENCE.items():
        namespace = {}
        exec(compile(source, name, "exec"), namespace)  # noqa: S102 - the test's own cheats
        result = checks.evaluate(name, namespace[checks.CHECKS[name].function])
        assert result.passed, (name, result.message)


@pytest.fixture(scope="module")
def reference_callers(tmp_path_factory):
    """One notebook per chapter whose every exercise with a forbidden tuple calls that reference."""
    root = tmp_path_factory.mktemp("references")
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        for name in grading.chapter_exercises(path.name):
            if name not in CALLS_THE_REFERENCE:
                continue
            function = checks.CHECKS[name].function
            cell = [c for c in notebook.cells if c.cell_type == "code" and f"def {function}(" in c.source][-1]
            cell.source = CALLS_THE_REFERENCE[name]
        (root / "submissions" / "cheat").mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, root / "submissions" / "cheat" / path.name)
    course_command(["grade", str(root / "submissions"), str(root / "grades"), "--exercise-timeout", "30",
                    *([] if NAMESPACES else ["--weak"])])
    with open(root / "grades" / "results.csv") as file:
        return {row["exercise"]: row for row in csv.DictReader(file)}


@pytest.mark.parametrize("chapter", [int(p.name[:2]) for p in NOTEBOOKS])
def test_calling_the_reference_scores_zero(reference_callers, chapter):
    """Each chapter: every exercise answered by calling its forbidden reference gets 0, with the reason; the
    chapter's other exercises (the book's own solutions) still pass."""
    names = [name for name in reference_callers if name.startswith(f"ch{chapter}.")]
    assert any(name in CALLS_THE_REFERENCE for name in names)
    for name in names:
        row = reference_callers[name]
        if name in CALLS_THE_REFERENCE:
            assert row["passed"] == "False", row
            assert re.search(r"ForbiddenCall: this exercise asks you to write \w+ yourself", row["message"]), row
        else:
            assert row["passed"] == "True", row


@pytest.mark.skipif(not NAMESPACES or not sys.platform.startswith("linux"), reason="needs the allow-list sandbox")
def test_a_mount_point_whose_name_has_a_space_is_not_writable(tmp_path):
    """/proc/self/mountinfo writes a space as \\040: a sandbox that re-mounts what it reads there read-only
    misses such a mount point. Here one is made in a mount namespace of the test's own, and the sandbox
    inside it tries to write there."""
    spaced = tmp_path / "course files"
    spaced.mkdir()
    script = ("import sys\nfrom attention_book.course import sandbox\n"
              "source = 'def attempt(path):\\n    try:\\n        open(path, \"w\").write(\"x\")\\n        return \"written\"\\n"
              "    except OSError as error:\\n        return type(error).__name__\\n'\n"
              "with sandbox.Sandbox(timeout=60) as child:\n    child.define(source, 'attempt')\n"
              "    print(child.call(sys.argv[1] + '/planted.txt'))\n")
    run = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                          'mount -t tmpfs none "$1" && "$2" -c "$3" "$1"; ls "$1"', "sh", str(spaced), sys.executable,
                          script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    answer, listing = run.stdout.splitlines()[0], run.stdout.splitlines()[1:]
    assert answer in ("FileNotFoundError", "OSError", "PermissionError"), run.stdout
    assert "planted.txt" not in listing


def _weak_grading(tmp_path, source, extra=()):
    """Grade one ch5 submission whose first solution cell is `source`, in a separate process (the weak mode
    makes the grading process a subreaper)."""
    teacher = next(p for p in NOTEBOOKS if p.name == CHAPTER)
    notebook = nbformat.read(teacher, as_version=4)
    cell = next(c for c in notebook.cells if c.cell_type == "code" and "def offset_causal_mask_by_hand(" in c.source)
    cell.source = source
    (tmp_path / "submissions" / "eve").mkdir(parents=True)
    nbformat.write(notebook, tmp_path / "submissions" / "eve" / CHAPTER)
    return subprocess.run([sys.executable, "-m", "attention_book.course", "grade", str(tmp_path / "submissions"),
                           str(tmp_path / "grades"), "--exercise-timeout", "30", *extra], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PATH": os.environ.get("PATH", "")})


def test_without_the_sandbox_the_grader_refuses_unless_told(tmp_path):
    """Where bubblewrap cannot run (here: not on PATH), grading stops with the reason and the option."""
    run = subprocess.run([sys.executable, "-c", "import shutil, sys\nshutil.which = lambda name, *a, **k: None\n"
                          "from attention_book.course.__main__ import main\nmain(sys.argv[1:])", "grade",
                          str(tmp_path), str(tmp_path / "grades")], capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "refusing to grade" in run.stderr and "--weak" in run.stderr
    assert not (tmp_path / "grades").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the subreaper is Linux's")
def test_weak_mode_kills_what_a_submission_left_behind_before_writing(tmp_path):
    """A detached process (double fork, new session) that waits and then rewrites the grade table is killed
    with its notebook; the tables written last are the grader's."""
    pid_file = tmp_path / "daemon.pid"
    source = ("import os\nimport time\n\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              f"        open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n        time.sleep(4)\n"
              f"        open({str(tmp_path / 'grades' / 'scores.csv')!r}, 'w').write('student,passed\\neve,999\\n')\n"
              "    os._exit(0)\n\n\ndef offset_causal_mask_by_hand(T, S):\n" + WRONG)
    run = _weak_grading(tmp_path, source, ["--weak"])
    assert run.returncode == 0, run.stderr
    assert "WEAK sandbox" in run.stderr
    time.sleep(6)
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert "999" not in (tmp_path / "grades" / "scores.csv").read_text()


def test_nbgraders_submitted_folder_is_graded_in_the_sandbox(tmp_path):
    """nbgrader's layout, submitted/<student>/<assignment>/<notebook>: the students are the folders; the
    cheats of the nbgrader path (patching torch.allclose, calling the reference, rewriting a classmate's
    submission) get nothing, and the classmate keeps every mark."""
    teacher = next(p for p in NOTEBOOKS if p.name == CHAPTER)
    submitted = tmp_path / "submitted"
    victim = submitted / "ada" / CHAPTER.removesuffix(".ipynb") / CHAPTER
    cheats = {
        "ada": None,
        "bob": "import torch\n\ntorch.allclose = torch.equal = lambda *a, **k: True\n\n\ndef offset_causal_mask_by_hand(T, S):\n"
               + WRONG,
        "cy": CALLS_THE_REFERENCE["ch5.offset_causal_mask"],
        "dee": f"import json\n\nnb = json.load(open({str(victim)!r}))\nnb['cells'] = []\n"
               f"json.dump(nb, open({str(victim)!r}, 'w'))\n\n\ndef offset_causal_mask_by_hand(T, S):\n" + WRONG,
    }
    for student, source in cheats.items():
        notebook = nbformat.read(teacher, as_version=4)
        if source is not None:
            cell = next(c for c in notebook.cells if c.cell_type == "code" and "def offset_causal_mask_by_hand(" in c.source)
            cell.source = source
        folder = submitted / student / CHAPTER.removesuffix(".ipynb")
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / CHAPTER)
        (folder / "timestamp.txt").write_text("2026-11-24 06:00:00")
    before = victim.read_bytes()
    course_command(["grade", str(submitted), str(tmp_path / "grades"), "--exercise-timeout", "30",
                    *([] if NAMESPACES else ["--weak"])])
    with open(tmp_path / "grades" / "totals.csv") as file:
        totals = {row["student"]: (row["passed"], row["total"]) for row in csv.DictReader(file)}
    n = str(len(grading.chapter_exercises(CHAPTER)))  # chapter 5's graded exercises
    assert totals["ada"] == (n, n)
    assert all(totals[s] == (str(int(n) - 1), n) for s in ("bob", "cy")), totals
    if NAMESPACES:
        assert totals["dee"] == (str(int(n) - 1), n) and victim.read_bytes() == before


@pytest.fixture(scope="module")
def small_class(tmp_path_factory):
    """Two students, one of them partly right, graded twice with the recorded seed."""
    root = tmp_path_factory.mktemp("small")
    teacher = next(p for p in NOTEBOOKS if p.name == CHAPTER)
    for student in ("ada", "bob"):
        notebook = nbformat.read(teacher, as_version=4)
        if student == "bob":
            cell = next(c for c in notebook.cells if c.cell_type == "code" and "def offset_causal_mask_by_hand(" in c.source)
            cell.source = "import torch\n\n\ndef offset_causal_mask_by_hand(T, S):\n" + WRONG
        (root / "submissions" / student).mkdir(parents=True)
        nbformat.write(notebook, root / "submissions" / student / CHAPTER)
    weak = [] if NAMESPACES else ["--weak"]
    course_command(["grade", str(root / "submissions"), str(root / "first"), *weak])
    seed = json.loads((root / "first" / "grading.json").read_text())["seed"]
    course_command(["grade", str(root / "submissions"), str(root / "again"), "--seed", str(seed), *weak])
    return root


def test_grades_a_teacher_can_use(small_class):
    """Totals per student, an LMS table (one row per student, one column per chapter: Canvas's gradebook
    import), a feedback file per student."""
    out = small_class / "first"
    with open(out / "canvas.csv") as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Chapter 5 exercises"]
    n = len(grading.chapter_exercises(CHAPTER))  # chapter 5's graded exercises; bob gets one wrong
    assert [(r["Student"], r["SIS Login ID"], r["Chapter 5 exercises"]) for r in rows[1:]] == [
        ("ada", "ada", str(n)), ("bob", "bob", str(n - 1))]
    with open(out / "totals.csv") as file:
        assert [tuple(r.values()) for r in csv.DictReader(file)] == [("ada", str(n), str(n)),
                                                                     ("bob", str(n - 1), str(n))]
    feedback = (out / "feedback" / "bob.md").read_text()
    assert f"Total: {n - 1} of {n}" in feedback and "must see key" in feedback
    assert sorted(p.name for p in (out / "feedback").iterdir()) == ["ada.md", "bob.md"]


def test_the_recorded_seed_grades_the_same_inputs_again(small_class):
    first, again = (json.loads((small_class / name / "grading.json").read_text()) for name in ("first", "again"))
    assert first["seed"] == again["seed"] and f"--seed {first['seed']}" in first["regrade"]
    assert (small_class / "first" / "results.csv").read_text() == (small_class / "again" / "results.csv").read_text()


@pytest.mark.skipif(not NAMESPACES, reason="needs the allow-list sandbox")
def test_processes_are_bounded_per_notebook_and_time_per_exercise():
    """A fork bomb meets the notebook's process limit; an endless loop costs its own exercise only."""
    if not sandbox.Cgroup.available() and os.getuid() == 0:
        pytest.skip("root without a cgroup: the kernel applies no process limit")
    bomb = ("import os\n\n\ndef spawn(n):\n    children = []\n    try:\n        for _ in range(n):\n"
            "            pid = os.fork()\n            if pid == 0:\n                import time\n                time.sleep(30)\n"
            "                os._exit(0)\n            children.append(pid)\n    except OSError as error:\n"
            "        return ['stopped', len(children), type(error).__name__]\n    return ['all', len(children)]\n")
    with sandbox.Sandbox(timeout=120) as child:
        child.exercise(bomb, "spawn")
        answer = child.call(200)
        child.finish()
        assert answer[0] == "stopped" and answer[1] < sandbox.PROCESSES, answer
        child.exercise("def loop():\n    while True:\n        pass\n", "loop", seconds=3)
        with pytest.raises(sandbox.SandboxEnded, match="time limit reached"):
            child.call()
    with sandbox.Sandbox(timeout=120) as child:  # what the grader does next: a fresh sandbox, the notebook's time left
        child.exercise("def one():\n    return 1\n", "one", seconds=10)
        assert child.call() == 1


def test_ch3_ov_matrices_are_what_each_head_writes():
    """ch3.ov_matrices' reference: with one token (every head's weight on it is 1), no biases and every other
    head's block of W^O zeroed, nn.MultiheadAttention outputs x @ ov[i]."""
    from attention_book.course.checks.ch03 import ov_matrices

    torch.manual_seed(0)
    E, H = 12, 3
    module = torch.nn.MultiheadAttention(E, H, bias=False, batch_first=True).eval()
    x = torch.randn(1, 1, E)  # (B, T, E), T = 1
    ov = ov_matrices(module.in_proj_weight[2 * E:].detach(), module.out_proj.weight.detach(), H)  # (H, E, E)
    for i in range(H):
        keep = torch.zeros(E, dtype=torch.bool)
        keep[i * E // H:(i + 1) * E // H] = True
        with torch.no_grad():
            single = torch.nn.MultiheadAttention(E, H, bias=False, batch_first=True).eval()
            single.load_state_dict(module.state_dict())
            single.out_proj.weight[:, ~keep] = 0
            got, _ = single(x, x, x, need_weights=False)
        torch.testing.assert_close(got[0, 0], x[0, 0] @ ov[i], rtol=1e-5, atol=1e-6)


def test_the_workers_preload_skips_a_module_that_is_not_installed(monkeypatch):
    """A teacher's machine without TensorFlow: the worker imports what it can and answers with that, so the
    Keras exercises' own processes say why they fail, instead of the whole notebook's sandbox dying."""
    from attention_book.course import worker

    monkeypatch.setattr(wire, "PRELOADABLE", ("no_such_module_for_the_book", "json"))
    assert worker.preload(["no_such_module_for_the_book", "json", "os"]) == ["json"]
    assert worker.preload("json") == []  # not a list: nothing
