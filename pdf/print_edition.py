"""The print edition's changes to the book (make pdf; pdf/_config.yml loads this extension).

They apply to the LaTeX builder only, on each page as it is read, whatever wrote its exercises (MyST
directives or anything else that makes sphinx-exercise's nodes):

- a chapter's title loses the number its page writes ("1. Embedding a sentence"): LaTeX numbers the
  chapters, once ("Chapter 1", "1 Embedding a sentence" in the contents);
- each interactive figure (attention_book.interactive's HTML output) becomes a one-line note: the
  matplotlib figure the chapter shows beside it is its static counterpart;
- figures and exercises are numbered within their chapter ("Exercise 7.3"), as the one PDF needs;
- the solutions leave the exercises and follow them in a "Solutions" section at the end of the chapter;
- the introduction (the root page) and the page holding the bibliography are unnumbered chapters before
  and after the numbered ones. This replaces sphinx-jupyterbook-latex's root-page transform, which flattens
  the introduction's sections and empties its exercise boxes.
"""

import re

import html

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx_exercise.nodes import solution_node
from sphinx_jupyterbook_latex.transforms import LatexRootDocPostTransforms

try:
    from sphinxcontrib.bibtex.nodes import bibliography
except ImportError:  # no bibliography: no page holds one
    bibliography = None

logger = logging.getLogger(__name__)

CHAPTER_NUMBER = re.compile(r"^\d+\.\s+")  # "7. The KV cache" -> "The KV cache"
INTERACTIVE = re.compile(r'<figure class="ab-figure"[^>]*>.*?<figcaption[^>]*>(.*?)</figcaption>', re.S)


def strip_chapter_number(doctree: nodes.document) -> None:
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None or not isinstance(section[0], nodes.title):
        return
    title = section[0]
    first = title[0] if len(title) else None
    if isinstance(first, nodes.Text) and CHAPTER_NUMBER.match(first):
        title.replace(first, nodes.Text(CHAPTER_NUMBER.sub("", first, count=1)))


def replace_interactive_figures(doctree: nodes.document, docname: str) -> None:
    """Raw HTML reaches LaTeX only from a notebook output whose HTML outranks its text (pdf/_config.yml)."""
    for raw in list(doctree.findall(nodes.raw)):
        if "html" not in raw.get("format", "").split():
            continue
        match = INTERACTIVE.search(raw.astext())
        if match is None:
            if "output" in raw.get("classes", []) or "text_html" in raw.get("classes", []):
                logger.warning("%s: a notebook output is HTML only; the print edition shows nothing for it",
                               docname, location=raw)
            continue
        note = nodes.paragraph(classes=["interactive-note"])
        note += nodes.emphasis(text=f"The online book has this figure to explore interactively: "
                                    f"{html.unescape(match.group(1))}.")
        raw.replace_self(note)


def gather_solutions(doctree: nodes.document) -> None:
    solutions = list(doctree.findall(solution_node))
    if not solutions:
        return
    chapter = next(iter(doctree.findall(nodes.section)))
    section = nodes.section(ids=[f"{chapter['ids'][0]}-solutions" if chapter["ids"] else "solutions"],
                            names=[])
    section += nodes.title(text="Solutions")
    for solution in solutions:
        solution.parent.remove(solution)
        section += solution
    chapter += section


def top_section(doctree: nodes.Element) -> nodes.section:
    return next(iter(doctree.findall(nodes.section)))


def adapt(app, doctree: nodes.document) -> None:
    if app.builder.format != "latex":
        return
    strip_chapter_number(doctree)
    replace_interactive_figures(doctree, app.env.docname)
    gather_solutions(doctree)
    if app.env.docname == app.config.root_doc:
        for toctree in doctree.findall(addnodes.toctree):
            toctree["numbered"] = 1  # chapter numbers prefix figure and exercise numbers: "Exercise 7.3"
    if bibliography is not None and next(iter(doctree.findall(bibliography)), None) is not None:
        top_section(doctree)["print_unnumbered"] = True


def unnumbered(section: nodes.section) -> None:
    """Wrap a chapter in LaTeX that turns numbering off (no "Chapter N", no N.M sections) and back on."""
    parent = section.parent
    index = parent.index(section)
    parent.insert(index + 1, nodes.raw("", r"\setcounter{secnumdepth}{\ABsecnumdepth}", format="latex"))
    parent.insert(index, nodes.raw("", r"\edef\ABsecnumdepth{\arabic{secnumdepth}}\setcounter{secnumdepth}{-1}",
                                   format="latex"))


class PrintStructure(SphinxPostTransform):
    """The whole book's tree (the LaTeX builder's single document): the introduction's toctree, which holds
    every chapter, moves after the introduction; the introduction's text becomes an unnumbered chapter of
    its own (Sphinx sets the root page's title as the book's and its sections as chapters); the marked
    chapters lose their numbers."""

    default_priority = 700
    formats = ("latex",)

    def run(self, **kwargs) -> None:
        if self.app.project.path2doc(self.document["source"]) != self.config.root_doc:
            return
        root = top_section(self.document)
        for wrapper in [node for node in root.findall(nodes.compound) if "toctree-wrapper" in node["classes"]
                        and node.get("docname") == self.config.root_doc]:
            wrapper.parent.remove(wrapper)
            self.document.append(wrapper)
        intro = nodes.section(ids=["print-introduction"], print_unnumbered=True)
        intro += nodes.title(text="Introduction")  # the title page names the book
        for child in root.children[1:]:
            root.remove(child)
            intro += child
        root += intro
        for section in list(self.document.findall(nodes.section)):
            if section.get("print_unnumbered"):
                unnumbered(section)


def drop_root_flattening(app) -> None:
    """sphinx-jupyterbook-latex registers its root-page transform when the builder starts: take it out."""
    transforms = app.registry.get_post_transforms()
    if LatexRootDocPostTransforms in transforms:
        transforms.remove(LatexRootDocPostTransforms)


def setup(app):
    # before Sphinx's title collector (priority 500), so that the contents and references read the new titles
    app.connect("doctree-read", adapt, priority=400)
    app.connect("builder-inited", drop_root_flattening, priority=900)  # after sphinx-jupyterbook-latex's
    app.add_post_transform(PrintStructure)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
