"""Sandboxed grading (issue 20): no submission decides its own grade and none can stop the others.

One class is graded once: the honest solutions, the untouched stubs and every cheat the issue names,
each as its own student. A cheat is the reference chapter with the solution cell of its first graded
exercise replaced: that exercise gets no marks, with a message saying what happened, the chapter's other
exercises are still graded (unless the cheat used up the notebook's time), and so is every other student.
"""

import csv
import json
import os
import re
import socket
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from attention_book import assignments
from attention_book.course import grading, sandbox, wire
from attention_book.course.notebooks import make_student_notebooks
from conftest import NOTEBOOKS

CHAPTER = "05_causal_attention.ipynb"
NAMESPACES = sandbox.isolation() is None
WRONG = "    return torch.zeros(T, T, dtype=torch.bool)\n"  # what a cheat's function returns when it returns

# Each cheat is the student's whole solution cell.
CHEATS = {
    "loops_forever": "def causal_mask_by_hand(T):\n    while True:\n        pass\n",
    "exhausts_memory": "def causal_mask_by_hand(T):\n    hoard = []\n    while True:\n"
                       "        hoard.append(bytearray(1 << 26))\n",
    "exits": "import sys\nsys.exit(0)\n\n\ndef causal_mask_by_hand(T):\n    sys.exit(0)\n",
    "exits_hard": "import os\n\n\ndef causal_mask_by_hand(T):\n    os._exit(0)\n",
    "kills_itself": "import os\nimport signal\n\n\ndef causal_mask_by_hand(T):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    "kills_parent": "import os\nimport signal\n\nos.kill(os.getppid(), signal.SIGKILL)\n\n\n"
                    "def causal_mask_by_hand(T):\n    os.kill(os.getppid(), signal.SIGKILL)\n",
    # the old grader's hole: one line into the file that ATTENTION_BOOK_GRADES names, and forged answers
    "forges_records": "import json\nimport os\n\nimport torch\n\n"
                      "record = {'exercise': 'ch5.causal_mask', 'passed': True, 'message': 'passed on 20 random cases'}\n"
                      "if os.environ.get('ATTENTION_BOOK_GRADES'):\n"
                      "    open(os.environ['ATTENTION_BOOK_GRADES'], 'a').write(json.dumps(record) + '\\n')\n"
                      "print(json.dumps(record))\n"
                      "for fd in range(3, 32):\n    try:\n"
                      "        os.write(fd, b'{\"defined\": true}\\n{\"value\": true}\\n')\n    except OSError:\n        pass\n\n\n"
                      "def causal_mask_by_hand(T):\n    return {'passed': True}\n",
    "monkeypatches_checks": "import numpy\nimport numpy.testing\nimport torch\nimport torch.testing\n\n"
                            "import attention_book.grader as grader\nfrom attention_book.course import checks\n\n"
                            "torch.testing.assert_close = lambda *a, **k: None\n"
                            "numpy.testing.assert_allclose = lambda *a, **k: None\n"
                            "torch.equal = torch.allclose = lambda *a, **k: True\n"
                            "checks.CHECKS['ch5.causal_mask'] = checks.Check(lambda f, seed: None, 'causal_mask_by_hand')\n"
                            "grader.evaluate = checks.evaluate = lambda *a, **k: checks.Result(a[0], True, 'passed')\n\n\n"
                            "def causal_mask_by_hand(T):\n" + WRONG,
    "uses_the_network": "import socket\n\nimport torch\n\n\ndef causal_mask_by_hand(T):\n"
                        "    socket.create_connection(('127.0.0.1', PORT), timeout=2).sendall(b'leak')\n"
                        "    return torch.ones(T, T, dtype=torch.bool).tril()\n",
    "reads_the_grades": "import torch\n\nopen(SCORES).read()\n\n\ndef causal_mask_by_hand(T):\n"
                        "    return torch.ones(T, T, dtype=torch.bool).tril()\n",
}
if NAMESPACES:  # without a PID namespace this would kill every process of the user, the tests included
    CHEATS["kills_everything"] = "import os\nimport signal\n\nos.kill(-1, signal.SIGKILL)\n\n\n" \
                                 "def causal_mask_by_hand(T):\n" + WRONG

EXPECTED = {  # student -> (passed, message pattern)
    "honest": ("True", r"passed on 20 random cases"),
    "stub": ("False", r"not implemented yet\. Hint: position i may see"),
    "loops_forever": ("False", r"stopped: time limit reached"),
    "exhausts_memory": ("False", r"MemoryError|stopped: it was killed"),
    "exits": ("False", r"your solution cell raised SystemExit"),
    "exits_hard": ("False", r"stopped: it exited with status 0"),
    "kills_itself": ("False", r"stopped: it was killed"),
    "kills_parent": ("False", r"stopped: it was killed|should have shape \(1, 1\), yours has \(\)"),  # its parent: a shell
    "forges_records": ("False", r"stopped: it answered out of turn"),
    "monkeypatches_checks": ("False", r"your causal mask stops position 0 from seeing position 0 \(itself\)"),
    "uses_the_network": ("False", r"your function raised (OSError|ConnectionRefusedError|PermissionError)"),
    "reads_the_grades": ("False", r"your solution cell raised (PermissionError|FileNotFoundError)"),
    "kills_everything": ("False", r"stopped: it was killed|raised ProcessLookupError"),  # nothing else to kill
}


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
    os.environ["ATTENTION_BOOK_GRADES"] = str(forged)  # as the old grader set it: a cheat looks for it
    for name, source in {"honest": None, "stub": None, **CHEATS}.items():
        notebook = nbformat.read(stub if name == "stub" else teacher, as_version=4)
        if source is not None:
            source = source.replace("PORT", str(listener.getsockname()[1])).replace("SCORES", repr(str(grades / "scores.csv")))
            cell = next(c for c in notebook.cells if c.cell_type == "code" and "def causal_mask_by_hand(" in c.source)
            cell.source = source
        (submissions / name).mkdir(parents=True)
        nbformat.write(notebook, submissions / name / CHAPTER)
    try:
        assignments.main(["grade", str(submissions), str(grades), "--timeout", "8", "--memory", "1024"])
    finally:
        del os.environ["ATTENTION_BOOK_GRADES"]
    try:
        received = listener.accept()[0].recv(16)
    except OSError:
        received = b""
    listener.close()
    with open(grades / "results.csv") as file:
        results = {(row["student"], row["exercise"]): row for row in csv.DictReader(file)}
    with open(grades / "scores.csv") as file:
        scores = {row["student"]: (row["passed"], row["total"]) for row in csv.DictReader(file)}
    return results, scores, forged, received


EXERCISES = ["ch5.causal_mask", "ch5.offset_causal_mask", "ch5.causal_attention"]


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_each_submission_gets_what_it_earned_with_the_reason(graded, student):
    if student == "kills_everything" and not NAMESPACES:
        pytest.skip("needs a PID namespace (unshare)")
    if student in ("uses_the_network", "reads_the_grades") and not NAMESPACES:
        pytest.skip("network and file isolation need Linux namespaces (unshare)")
    results, scores, _, _ = graded
    passed, message = EXPECTED[student]
    first = results[(student, "ch5.causal_mask")]
    assert first["passed"] == passed, first
    assert re.search(message, first["message"]), first["message"]
    others = [results[(student, name)] for name in EXERCISES[1:]]
    if student == "stub":
        assert all(r["message"].startswith("not implemented yet. Hint:") for r in others)
        assert scores[student] == ("0", "3")
    elif student == "loops_forever":  # the notebook's time is spent
        assert all(r["message"].endswith("stopped: time limit reached") for r in others)
        assert scores[student] == ("0", "3")
    else:  # the other exercises, honest, are graded as usual
        assert all(r["passed"] == "True" for r in others), others
        assert scores[student] == ("3" if passed == "True" else "2", "3")


def test_without_namespaces_the_worker_is_still_not_the_graders_child(monkeypatch):
    monkeypatch.setitem(sandbox._NAMESPACES, "why", "pretend: no unshare")
    with sandbox.Sandbox(timeout=20) as child:
        child.define("import os\n\n\ndef parent():\n    return os.getppid()\n", "parent")
        assert child.call() not in (os.getpid(), 0)


def test_everyone_is_graded_and_nothing_leaks(graded):
    results, scores, forged, received = graded
    assert set(scores) == {"honest", "stub", *CHEATS}, "a submission stopped the grading of others"
    assert not forged.exists(), "the sandbox saw the grader's environment"
    if NAMESPACES:
        assert received == b"", "a submission reached the network"


def test_a_notebook_without_the_function_or_readable_json_scores_zero(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nbformat.write(notebook, tmp_path / CHAPTER)
    (tmp_path / "07_kv_cache.ipynb").write_text("{not json")
    assert [r.message for r in grading.grade_notebook(tmp_path / CHAPTER)] == [
        f"no code cell defines {function}()" for function in ("causal_mask_by_hand", "offset_causal_mask_by_hand",
                                                              "causal_attention_by_hand")]
    broken = grading.grade_notebook(tmp_path / "07_kv_cache.ipynb")
    assert broken and all(not r.passed and r.message.startswith("the notebook cannot be read") for r in broken)
    assert grading.chapter_exercises("notes.ipynb") == []


def test_the_sandbox_environment_holds_nothing_of_the_graders(monkeypatch):
    monkeypatch.setenv("TEACHER_SECRET", "s3cret")
    with sandbox.Sandbox(timeout=20) as child:
        child.define("import os\n\n\ndef environment():\n    return dict(os.environ), os.getcwd()\n", "environment")
        environment, cwd = child.call()
    assert "TEACHER_SECRET" not in environment and "ATTENTION_BOOK_GRADES" not in environment
    assert set(environment) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONHASHSEED", "OMP_NUM_THREADS",
                                "TF_CPP_MIN_LOG_LEVEL", "LC_CTYPE", "PWD", "SHLVL", "_"}  # the last three: sh's
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
    """The grader's own code, the teacher's files and other folders are read-only to the child; its scratch
    folder is not. (Without this, one submission could rewrite the grader for everyone graded after it.)"""
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
    assert results[:2] == ["OSError 30", "OSError 30"], results  # EROFS: read-only file system
    assert results[2] == "written"
    assert victim.read_text() == "untouched" and "tampered" not in grader_code.read_text()

