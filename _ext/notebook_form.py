"""Chapters written for Jupyter and Colab, built as MyST (issue 40): on Sphinx's `source-read`, every
notebook's exercises, solutions, citations, references and attached diagrams are rewritten into the
MyST form the book has always been built from (attention_book.notebook_form.myst_notebook), before
MyST-NB parses the notebook. The pages, labels and exercise numbering are those of the MyST form."""

import json

from attention_book.notebook_form import myst_notebook


def rewrite(app, docname, source):
    """For a notebook, `source[0]` is its JSON text: replace it with the MyST form."""
    path = app.env.doc2path(docname)
    if not str(path).endswith(".ipynb"):
        return
    source[0] = json.dumps(myst_notebook(json.loads(source[0])), indent=1, ensure_ascii=False)


def setup(app):
    app.connect("source-read", rewrite)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
