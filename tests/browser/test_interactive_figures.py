"""The interactive figures of the built book, driven by the keyboard through the DevTools protocol (issue 28).

Every figure (`attention_book.interactive`) on every page: the attention explorer shows, for the query
token the keyboard focuses, the weights the chapter printed in the same cell; the KV-cache and tile
step-throughs, stepped with the keyboard, show the states the package stored in the figure; and no
console error or request leaving the machine comes of it. Run by `make browser` after `make book`.
"""

import json
import re

import pytest
from test_rendered_pages import PAGES, browser, console_errors, open_page, site  # noqa: F401 (fixtures)

KEYS = {"Tab": 9, "Enter": 13, "ArrowRight": 39, "ArrowLeft": 37}


def press(page, key: str) -> None:
    """One key pressed and released, as a keyboard sends it (Enter also types "\\r", which clicks a button)."""
    extra = {"text": "\r"} if key == "Enter" else {}
    page.send("Input.dispatchKeyEvent", type="keyDown", key=key, code=key, windowsVirtualKeyCode=KEYS[key], **extra)
    page.send("Input.dispatchKeyEvent", type="keyUp", key=key, code=key, windowsVirtualKeyCode=KEYS[key])


def figures(page) -> list[dict]:
    return page.evaluate("""Array.from(document.querySelectorAll('figure.ab-figure')).map(f => ({
        id: f.id, kind: f.dataset.kind, started: f.dataset.started === '1',
        data: JSON.parse(f.querySelector("script[type='application/json']").textContent),
        printed: (() => { const cell = f.closest('div.cell');
                          const pre = cell && cell.querySelector('div.cell_output pre');
                          return pre ? pre.innerText : ''; })(),
    }))""")


def printed_matrix(text: str, rows: int, cols: int) -> list[list[float]] | None:
    """The last rows × cols numbers printed at 4 decimals in `text`, row by row (however torch wrapped them);
    None when the cell prints no such matrix."""
    numbers = [float(x) for x in re.findall(r"-?\d+\.\d{4}\b", text)][-rows * cols:]
    if len(numbers) != rows * cols:
        return None
    return [numbers[r * cols:(r + 1) * cols] for r in range(rows)]


def focused(page) -> str:
    return page.evaluate("document.activeElement ? document.activeElement.outerHTML.slice(0, 120) : ''")


def check_explorer(page, figure: dict) -> None:
    ident, data = figure["id"], figure["data"]
    first = data["maps"][0]["weights"]
    # What the cell printed, where it prints the first map (chapter 3); else the chapter's tensor as the
    # figure holds it (chapter 11's 32 × 32 maps are drawn, not printed).
    matrix = printed_matrix(figure["printed"], len(first), len(first[0])) or first
    page.evaluate(f"document.querySelector('#{ident} select').focus()")
    press(page, "Tab")  # from the head/layer select to the first query token
    assert 'data-query="0"' in focused(page), f"{ident}: Tab from the select does not reach the first query"
    for t in range(len(first)):
        if t:
            press(page, "ArrowRight")
        shown = page.evaluate(f"""Array.from(document.querySelectorAll('#{ident} .ab-key'))
            .map(c => c.dataset.weight)""")
        assert f'data-query="{t}"' in focused(page), f"{ident}: ArrowRight does not move to query {t}"
        expected = [f"{w:.4f}" for w in matrix[t]]
        assert shown == expected, f"{ident}: query {t} shows {shown}, the chapter printed {expected}"
    press(page, "Enter")  # pin the last query; moving on keeps it shown
    last = len(first) - 1
    press(page, "ArrowLeft")
    pinned = page.evaluate(f"""[document.querySelector('#{ident} [aria-pressed="true"]')?.dataset.query,
        Array.from(document.querySelectorAll('#{ident} .ab-key')).map(c => c.dataset.weight)]""")
    assert pinned[0] == str(last), f"{ident}: Enter did not pin query {last}"
    assert pinned[1] == [f"{w:.4f}" for w in matrix[last]], f"{ident}: the pinned row did not stay shown"
    if len(data["maps"]) > 1:  # another head or layer: its own row for the pinned query
        page.evaluate(f"""(() => {{ const s = document.querySelector('#{ident} select'); s.value = '1';
            s.dispatchEvent(new Event('change')); }})()""")
        shown = page.evaluate(f"Array.from(document.querySelectorAll('#{ident} .ab-key')).map(c => c.dataset.weight)")
        expected = ["" if w is None else f"{w:.4f}" for w in data["maps"][1]["weights"][last]]
        assert shown == expected, f"{ident}: switching to {data['maps'][1]['name']} shows {shown}"


def step_through(page, figure: dict, read: str, expected) -> None:
    """Press Next with the keyboard through every step and back once; `read` evaluates to what is shown."""
    ident, steps = figure["id"], figure["data"]["steps"]
    page.evaluate(f"document.querySelector('#{ident} [data-step=\"next\"]').focus()")
    for i, step in enumerate(steps):
        if i:
            press(page, "Enter")
        assert page.evaluate(f"document.getElementById('{ident}').dataset.step") == str(i), \
            f"{ident}: Enter on Next did not reach step {i}"
        shown = page.evaluate(read)
        assert shown == expected(step), f"{ident}, step {i}: shows {shown}, stored {expected(step)}"
    page.evaluate(f"document.querySelector('#{ident} [data-step=\"back\"]').focus()")
    press(page, "Enter")
    assert page.evaluate(f"document.getElementById('{ident}').dataset.step") == str(len(steps) - 2)


def check_kv_cache(page, figure: dict) -> None:
    ident = figure["id"]
    read = f"""Array.from(document.querySelectorAll('#{ident} .ab-cache')).map(c =>
        Array.from(c.querySelectorAll('.ab-slot-text')).map(s => s.textContent))"""

    def expected(step):
        def slot(p):
            return "·" if p is None else f"p{p}"

        return [[slot(p) for p in step["full"]], [slot(p) for p in step["ring"]],
                ["·" if owner is None else owner for owner in step["pool"]]]

    step_through(page, figure, read, expected)


def check_tiles(page, figure: dict) -> None:
    ident = figure["id"]
    read = f"""Array.from(document.querySelectorAll('#{ident} .ab-state td')).map(td => td.textContent)"""

    def expected(step):
        return [f"{step['m']:.4f}", f"{step['l']:.4f}", ", ".join(f"{a:.4f}" for a in step["acc"]),
                ", ".join(f"{o:.4f}" for o in step["out"])]

    step_through(page, figure, read, expected)
    last = figure["data"]["steps"][-1]
    assert [round(o, 3) for o in last["out"]] == [round(e, 3) for e in figure["data"]["exact"]], \
        f"{ident}: after the last tile acc / l {last['out']} is not softmax · V {figure['data']['exact']}"


CHECKS = {"explorer": check_explorer, "kv-cache": check_kv_cache, "tiles": check_tiles}


@pytest.mark.parametrize("name", [p for p in PAGES if p.startswith("chapters/")])
def test_interactive_figures_by_keyboard(site, browser, name):  # noqa: F811 (fixtures)
    page = open_page(browser, f"{site}/{name}.html")
    try:
        page.drain(0.5)
        found = figures(page)
        for figure in found:
            assert figure["started"], f"{name}: figure {figure['id']} did not start (script error?)"
            CHECKS[figure["kind"]](page, figure)
        page.drain(0.5)
        errors = console_errors(page)
        assert errors == [], f"{name}: console errors {errors}"
        outgoing = [e["params"]["request"]["url"] for e in page.events if e.get("method") == "Network.requestWillBeSent"
                    and not e["params"]["request"]["url"].startswith((site, "data:", "blob:", "about:"))]
        assert outgoing == [], f"{name}: requests leaving the machine"
    finally:
        page.ws.close()


def test_chapter_3_prints_the_matrix_its_explorer_shows():
    """At least one explorer is compared with a matrix its chapter prints, not only with its own data."""
    from test_rendered_pages import ROOT

    cells = json.loads((ROOT / "chapters" / "03_multi_head_attention.ipynb").read_text())["cells"]
    outputs = ["".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/html", ""))
               for c in cells for o in c.get("outputs", [])]
    printed = [i for i, text in enumerate(outputs) if 'data-kind="explorer"' in text]
    assert printed, "chapter 3 shows no attention explorer"
    cell_text = "".join(outputs[printed[0] - 1:printed[0]])
    assert printed_matrix(cell_text, 6, 6), "chapter 3's explorer cell prints no 6 × 6 matrix before the figure"


def test_every_kind_of_figure_is_in_the_book():
    """The three figures issue 28 asks for are in the chapters' stored outputs."""
    from test_rendered_pages import ROOT

    kinds = set()
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for output in cell.get("outputs", []):
                html = "".join(output.get("data", {}).get("text/html", ""))
                kinds.update(re.findall(r'class="ab-figure" id="[\w-]+" data-kind="([\w-]+)"', html))
    assert kinds == set(CHECKS), f"interactive figures in the chapters: {sorted(kinds)}"
