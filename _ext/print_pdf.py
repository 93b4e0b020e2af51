"""The rendered book links its print edition (README, "A print edition") when `make pdf` has built it.

At the start of an HTML build: if _build/pdf/attention-from-scratch.pdf exists, the page template
(_templates/print-pdf.html, in the article header's buttons) gets its name and shows a link; at the end
the PDF is copied into the built site beside index.html. Without the PDF the book builds as before, with
no link.
"""

import shutil
from pathlib import Path

PDF = "attention-from-scratch.pdf"


def built_pdf(app) -> Path:
    return Path(app.srcdir) / "_build" / "pdf" / PDF


def offer_pdf(app) -> None:
    if app.builder.format == "html":
        app.config.html_context["print_pdf"] = PDF if built_pdf(app).is_file() else ""


def copy_pdf(app, exception) -> None:
    if exception is None and app.builder.format == "html" and built_pdf(app).is_file():
        shutil.copyfile(built_pdf(app), Path(app.outdir) / PDF)


def setup(app):
    app.connect("builder-inited", offer_pdf)
    app.connect("build-finished", copy_pdf)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
