"""Exercises and assignments: the checks are not vacuous (issues 8 and 20), student notebooks hide the
solutions. Sandboxed grading and its cheats: test_grading.py."""

import re

import nbformat
import numpy as np
import pytest
import torch

from attention_book.course import checks, notebooks as assignments
from attention_book.positions import apply_rope, sinusoidal_shift
from conftest import NOTEBOOKS


def solution_cells(path):
    """(exercise label, solution source, check name, function name) of every graded exercise of a chapter."""
    cells = nbformat.read(path, as_version=4).cells
    found = []
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown" and (start := assignments.SOLUTION_START.search(cell.source)):
            solution, check_cell = cells[i + 1].source, cells[i + 3].source
            name, function = re.search(r'check\("([\w.]+)", (\w+)\)', check_cell).groups()
            found.append((start.group(1), solution, name, function))
    return found


GRADED = [(path.name, *item) for path in NOTEBOOKS for item in solution_cells(path)]


def define(source: str, function: str):
    namespace = {}
    exec(compile(source, "<solution>", "exec"), namespace)  # noqa: S102 - the book's own cells
    return namespace[function]



def test_every_chapter_has_three_graded_exercises():
    for path in NOTEBOOKS:
        sources = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]
        assert sum("{exercise}" in s for s in sources) >= 3, path.name
        assert len(solution_cells(path)) >= 3, path.name
    assert {name for _, _, _, name, _ in GRADED} == set(checks.CHECKS), "every check is used by a chapter"


@pytest.mark.parametrize(("chapter", "label", "solution", "name", "function"), GRADED, ids=lambda v: str(v)[:30])
def test_reference_solution_passes(chapter, label, solution, name, function, capsys):
    result = checks.evaluate(name, define(solution, function))
    assert result.passed, result.message
    function = define(solution, function)
    capsys.readouterr()  # what the solution cell itself prints
    checks.check(name, function)
    assert capsys.readouterr().out == f"✓ {name}: passed on {checks.CASES} random cases\n"


@pytest.mark.parametrize(("chapter", "label", "solution", "name", "function"), GRADED, ids=lambda v: str(v)[:30])
def test_student_stub_fails_with_its_hint(chapter, label, solution, name, function):
    stub = assignments.stub(solution)
    assert "NotImplementedError" in stub
    hint = assignments.HINT.search(solution).group(1)
    result = checks.evaluate(name, define(stub, function))
    assert not result.passed
    assert result.message == f"not implemented yet. Hint: {hint}"


# A deliberately wrong solution for every check, and the feedback it must get.
WRONG = {
    "ch1.embed": (lambda ids, table: table[: len(ids)], r"the embeddings of ids .*; position t gets row ids\[t\]"),
    "ch3.mask_to_sdpa": (lambda attn_mask, key_padding_mask: attn_mask[None, None] | key_padding_mask[:, None, None, :],
                         r"the convention is flipped: nn.MultiheadAttention's True means blocked"),
    "ch4.padded_attention": (lambda q, k, v, lengths: torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, -1) @ v,
                             r"the padding is attended: with lengths \[.*\], keys at or beyond a length"),
    # chapters 1-4's exercises (issue 29)
    "ch1.mix": (lambda x, temperature: torch.softmax(x @ x.T, dim=-1) @ x,
                r"the scores are not divided by the temperature"),
    "ch1.running_mean": (lambda x: torch.ones(len(x), len(x)).tril() @ x, r"those are running sums: divide row t"),
    "ch2.saturation": (lambda q, k: ((k @ q[:, :, None]).squeeze(-1).var(),
                                     torch.softmax((k @ q[:, :, None]).squeeze(-1), -1).max(-1).values.mean()),
                       r"that is the variance of the unscaled scores: divide them by √d_k"),
    "ch2.additive": (lambda q, k, W_1, W_2, v_a: ((q @ W_1)[:, None] + (k @ W_2)[None]) @ v_a,
                     r"the tanh is missing"),
    "ch3.mha_forward": (lambda x, in_w, in_b, out_w, out_b, H: torch.softmax(
        (x @ in_w[: x.shape[-1]].T + in_b[: x.shape[-1]]) @ (x @ in_w[x.shape[-1]: 2 * x.shape[-1]].T
                                                            + in_b[x.shape[-1]: 2 * x.shape[-1]]).transpose(1, 2)
        / x.shape[-1] ** 0.5, -1) @ (x @ in_w[2 * x.shape[-1]:].T + in_b[2 * x.shape[-1]:]) @ out_w.T + out_b,
                        r"you attended with one head of width E = \d+: split q, k and v into H = \d+ heads"),
    "ch4.masked_loss": (lambda logits, labels, lengths: -torch.log_softmax(logits, -1).gather(-1, labels[..., None])
                        .mean(), r"you averaged over every position, padding included"),
    "ch5.offset_causal_mask": (lambda T, S: torch.ones(T, S, dtype=torch.bool).tril(),
                               r"your triangle starts at the top left \(as is_causal=True does\)"),
    "ch5.causal_attention": (lambda q, k, v: (torch.softmax(q @ k.T / q.shape[-1] ** 0.5, -1)
                                              * torch.ones(len(q), len(q)).tril()) @ v,
                             r"you masked after the softmax: each row's weights no longer sum to 1"),
    "ch6.keras_output": (lambda context, kernel, bias: np.einsum("bhtk,hke->bhte", context, kernel) + bias,
                         r"your result keeps the head axis"),
    "ch6.kernel_to_linear": (lambda kernel, bias: (kernel.reshape(kernel.shape[0], -1), bias.reshape(-1)),
                             r"nn.Linear keeps its weight as \(out, in\) = \(\d+, \d+\): transpose"),
    "ch9.merge_partials": (lambda m_a, l_a, acc_a, m_b, l_b, acc_b: (torch.maximum(m_a, m_b), l_a + l_b, acc_a + acc_b),
                           r"l_a \+ l_b adds sums taken against different maxima"),
    "ch9.tiled_attention": (lambda q, k, v, block: sum(torch.softmax(q @ k[i:i + block].T / q.shape[1] ** 0.5, -1)
                                                       @ v[i:i + block] for i in range(0, len(k), block))
                            / len(range(0, len(k), block)),
                            r"you averaged the blocks' outputs"),
    "ch2.attention": (lambda q, k, v: torch.softmax(q @ k.T, dim=-1) @ v, r"the scores are not scaled"),
    "ch3.split_heads": (lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1),
                        r"head 1 of position 0 should hold columns .*reshape to \(B, T, H, E/H\) first"),
    "ch4.padding_mask": (lambda lengths, S: torch.arange(S) <= lengths[:, None],
                         r"sequence \d+ has length \d+: your mask lets queries see padded position \d+"),
    "ch5.causal_mask": (lambda T: torch.ones(T, T, dtype=torch.bool).tril(1),
                        r"your causal mask lets position 0 see position 1, which comes after it"),
    "ch6.keras_projection": (lambda x, kernel, bias: np.einsum("bte,ehk->bhtk", x, kernel),
                             r"the bias is missing"),
    "ch8.cache_size": (lambda layers, kv_heads, head_dim, length, b, batch=1, window=None:
                       layers * kv_heads * head_dim * min(length, window or length) * b * batch,
                       r"half the expected size: every position stores a key AND a value"),
    "ch8.ring_slots": (lambda length, window: torch.arange(max(0, length - window), length),
                       r"the right positions, in the wrong order"),
    "ch7.cached_step": (lambda q, k, v, keys, values, n: (keys.__setitem__((..., n, slice(None)), k[..., 0, :]),
                                                          values.__setitem__((..., n, slice(None)), v[..., 0, :]),
                                                          torch.softmax(q @ keys.mT / q.shape[-1] ** 0.5, -1) @ values,
                                                          n + 1)[2:],
                        r"you attended over the whole buffer"),
    "ch7.fit_bandwidth": (lambda b, t: tuple(np.polyfit(b, t, 1)[::-1]), r"your bandwidth is the slope"),
    "ch8.grouped_decode": (lambda q, k, v: torch.softmax(q @ k.repeat(1, q.shape[1] // k.shape[1], 1, 1).mT
                                                         / q.shape[-1] ** 0.5, -1)
                           @ v.repeat(1, q.shape[1] // k.shape[1], 1, 1),
                           r"heads go to groups in order"),
    "ch7.decode_step": (lambda q, k, v, kc, vc: (torch.softmax(q @ kc.transpose(-2, -1), dim=-1) @ vc, kc, vc),
                        r"the returned keys still have S positions: append the new key"),
    "ch9.running_max_and_sum": (lambda x, block: (float(x.max()), sum(float(torch.exp(x[i:i + block] - x[i:i + block].max()).sum())
                                                                      for i in range(0, len(x), block))),
                                r"the running sum ends at .* multiply the sum so far by exp\(m − m'\)"),
    "ch10.rope_half": (lambda x: apply_rope(x), r"that is RoPE on adjacent pairs \(2i, 2i \+ 1\), this book's layout"),
    "ch11.previous_token_score": (lambda q, k: torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
                                 .diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1),
                                 r"the weights need the causal mask"),
    "ch10.sinusoidal_shift": (lambda offset, width: sinusoidal_shift(offset, width).T,
                             r"your M moves back by \d+ positions, not forward"),
}


@pytest.mark.parametrize("name", sorted(checks.CHECKS))
def test_wrong_solution_gets_specific_feedback(name):
    wrong, message = WRONG[name]
    result = checks.evaluate(name, wrong)
    assert not result.passed
    assert re.search(message, result.message), result.message


def test_causal_mask_feedback_names_the_positions():
    def future_leak(T):
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        if T > 4:
            mask[2, 4] = True
        return mask

    assert checks.evaluate("ch5.causal_mask", future_leak).message == \
        "your causal mask lets position 2 see position 4, which comes after it"
    assert "stops position 0 from seeing position 0 (itself)" in \
        checks.evaluate("ch5.causal_mask", lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1)).message


def test_a_crashing_solution_is_feedback_not_a_crash():
    result = checks.evaluate("ch4.padding_mask", lambda lengths, S: lengths.foo)
    assert not result.passed and result.message.startswith("your function raised AttributeError")
    unreadable = checks.evaluate("ch4.padding_mask", lambda lengths, S: "a string")
    assert not unreadable.passed and unreadable.message.startswith("the mask should have shape")
    unusable = checks.evaluate("ch2.attention", lambda q, k, v: [[0.0] * v.shape[1]] * q.shape[0])
    assert unusable.message.startswith("the context vectors should have shape")


def test_every_check_names_the_function_its_chapter_defines():
    for _, _, solution, name, function in GRADED:
        assert checks.CHECKS[name].function == function, name
        assert f"def {function}(" in solution, name


def test_grading_seeds_draw_other_inputs_than_the_notebook():
    seen = {}
    for seed in (0, 1):
        def spy(lengths, S, seed=seed):
            seen.setdefault(seed, []).append((lengths.tolist(), S))
            return torch.arange(S) < lengths[:, None]
        assert checks.evaluate("ch4.padding_mask", spy, seed=seed).passed
    assert seen[0] != seen[1]


@pytest.fixture(scope="module")
def students(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    return {path.name: path for path in assignments.make_student_notebooks(NOTEBOOKS[0].parent, out)}


def test_student_notebooks_keep_everything_but_solutions(students):
    assert sorted(students) == sorted(p.name for p in NOTEBOOKS)
    for path in NOTEBOOKS:
        teacher = nbformat.read(path, as_version=4)
        student = nbformat.read(students[path.name], as_version=4)
        text = "\n".join(c.source for c in student.cells)
        assert "{solution" not in text, f"{path.name}: a solution leaked"
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in student.cells if c.cell_type == "code")
        for _, solution, _, _ in solution_cells(path):
            body = solution.split('"""')[-1]  # the code after the docstring
            assert body.strip() not in text
        kept = [c.source for c in teacher.cells if "{solution" not in c.source and not c.source.startswith("# Hint:")]
        assert all(source in text for source in kept), f"{path.name}: a cell other than a solution was changed"


def test_stub_keeps_imports_signature_and_docstring():
    """The imports stay: grading runs the solution cell alone, so a student who fills in the stub needs them."""
    solution = '# Hint: think.\nimport torch\n\n\ndef f(a, b=2):\n    """Doc."""\n    return a + b\n'
    assert assignments.stub(solution) == \
        'import torch\n\n\ndef f(a, b=2):\n    """Doc."""\n    raise NotImplementedError(\'think.\')'
    assert assignments.stub(solution.replace("import torch\n", "")) == \
        'def f(a, b=2):\n    """Doc."""\n    raise NotImplementedError(\'think.\')'
    with pytest.raises(ValueError, match="must start with a '# Hint: ...' line"):
        assignments.stub("def f():\n    return 1\n")


def test_checks_live_one_module_per_chapter_and_name_what_they_forbid():
    """`course/checks/chNN.py` registers only chapter NN's exercises; every forbidden name is a dotted path
    to something that exists (a typo would forbid nothing)."""
    import importlib

    for number, module in enumerate(checks.CHAPTERS, 1):
        assert module.__name__.endswith(f".ch{number:02d}")
        assert module.CHECKS and all(name.startswith(f"ch{number}.") for name in module.CHECKS), module.__name__
    for name, entry in checks.CHECKS.items():
        assert isinstance(entry.forbidden, tuple), name
        for dotted in entry.forbidden:
            owner, attribute = dotted.rsplit(".", 1)
            parts = owner.split(".")
            for split in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
                try:
                    target = importlib.import_module(".".join(parts[:split]))
                except ImportError:
                    continue
                for part in parts[split:]:
                    target = getattr(target, part)
                break
            assert callable(getattr(target, attribute)), f"{name}: {dotted} is not callable"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_every_graded_exercise_names_what_it_may_not_call(path):
    """COORD rule 3 (issue 33): the exercise's markdown has a "Write it yourself" line naming every dotted
    name of its check's forbidden tuple, so the student reads what the grader switches off."""
    from attention_book.course import export

    for exercise in export.graded_exercises(nbformat.read(path, as_version=4)):
        forbidden = checks.CHECKS[exercise["name"]].forbidden
        if forbidden:
            assert "**Write it yourself:**" in exercise["text"], exercise["label"]
        missing = [name for name in forbidden if f"`{name}`" not in exercise["text"]]
        assert not missing, f"{path.name}, exercise {exercise['label']}: its markdown does not name {missing}"


def test_stored_feedback_is_what_the_chapters_and_checks_give(tmp_path):
    """data/feedback/ (the students' instant feedback without the checks) is regenerated from the chapters'
    solutions and the checks; a change to either without `python -m attention_book.course feedback chapters`
    fails here."""
    from attention_book.course import feedback

    written = feedback.record(NOTEBOOKS[0].parent, tmp_path)
    assert sorted(p.name for p in written) == sorted(p.name for p in feedback.FOLDER.glob("*.json"))
    for path in written:
        assert path.read_text() == (feedback.FOLDER / path.name).read_text(), f"{path.name} is stale"


TYPE_ONLY = {"ch1.encode"}  # WRONG differs in type only (a list for a tensor): the replay compares values


@pytest.fixture
def student_install(monkeypatch):
    """`check` as in the package students install, which leaves out attention_book.course.checks."""
    from attention_book.course import feedback

    monkeypatch.setattr(feedback, "_full_checks", lambda: None)
    return feedback


@pytest.mark.parametrize(("chapter", "label", "solution", "name", "function"), GRADED, ids=lambda v: str(v)[:30])
def test_without_the_checks_instant_feedback_still_works(student_install, chapter, label, solution, name, function,
                                                          capsys):
    """The reference passes with the very message the chapters print, the stub fails with its hint, and the
    wrong answer of WRONG fails saying where."""
    from attention_book.course import check

    reference = define(solution, function)
    capsys.readouterr()
    check(name, reference)
    assert capsys.readouterr().out == f"✓ {name}: passed on {checks.CASES} random cases\n"
    stub = student_install.evaluate(name, define(assignments.stub(solution), function))
    assert not stub.passed and stub.message.startswith("not implemented yet. Hint:")
    if name in TYPE_ONLY:
        return
    wrong = student_install.evaluate(name, WRONG[name][0])
    assert not wrong.passed and re.match(r"case \d+ of \d+, inputs \(|your function raised", wrong.message), wrong.message
    with pytest.raises(ValueError, match="needs the grader's checks"):
        student_install.evaluate(name, reference, seed=1)


def test_the_package_students_install_leaves_the_checks_out(tmp_path):
    """The wheel (what `pip install "attention-book @ git+..."` installs) has the stored feedback and no
    reference answers."""
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    import shutil

    root, source = Path(__file__).resolve().parents[1], tmp_path / "source"  # a copy: no stale build/ folder
    shutil.copytree(root / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path), str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    names = zipfile.ZipFile(next(tmp_path.glob("*.whl"))).namelist()
    assert "attention_book/course/feedback.py" in names and "attention_book/data/feedback/ch5.json" in names
    assert not [n for n in names if "course/checks" in n], "the grader's checks are in the students' package"


def test_the_student_edition_has_no_solutions_and_its_buttons_open_student_notebooks(tmp_path):
    """The book's student edition: no solution code or written solution anywhere (removed, not folded), the
    other cells' outputs kept, and its repository (hence Colab) buttons point at where the teacher publishes
    it, or are removed when there is no such place."""
    root = NOTEBOOKS[0].parent.parent
    edition = tmp_path / "edition"
    written = assignments.make_student_edition(root, edition, "https://github.com/teacher/course", "spring",
                                               "book")
    assert sorted(p.name for p in written) == sorted(p.name for p in NOTEBOOKS)
    for path in NOTEBOOKS:
        student = nbformat.read(edition / "chapters" / path.name, as_version=4)
        text = "\n".join(c.source for c in student.cells)
        assert "{solution" not in text, f"{path.name}: a solution leaked"
        for _, solution, _, _ in solution_cells(path):
            assert solution.split('"""')[-1].strip() not in text
        teacher = nbformat.read(path, as_version=4)
        kept = sum(bool(c.get("outputs")) for c in student.cells if c.cell_type == "code")
        assert kept >= sum(bool(c.get("outputs")) for c in teacher.cells if c.cell_type == "code") - len(
            solution_cells(path)), f"{path.name}: outputs of cells other than solutions were dropped"
    config = (edition / "_config.yml").read_text()
    assert "url: https://github.com/teacher/course" in config and 'path_to_book: "book"' in config
    assert "branch: spring" in config and "attention-from-scratch/attention-book" not in config
    bare = assignments.make_student_edition(root, tmp_path / "bare")
    config = (tmp_path / "bare" / "_config.yml").read_text()
    assert 'colab_url: ""' in config and "use_repository_button: false" in config and bare
