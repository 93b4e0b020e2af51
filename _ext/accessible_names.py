"""Sphinx extension: the folded code cells' toggles are named by what they show.

Why: MyST-NB writes every hidden cell as `<details><summary aria-label="Toggle hidden content">` around a
visible "Show code cell source". A screen reader then announces a name the reader cannot see, and axe-core
reports it (label-content-name-mismatch, serious). Without the aria-label the summary's name is its
visible text. The theme's search button and colour switch get the same fix in _templates/components/.
"""

HIDDEN_LABEL = '<summary aria-label="Toggle hidden content">'


def name_summaries_by_their_text(app, pagename, templatename, context, doctree):
    if HIDDEN_LABEL in context.get("body", ""):
        context["body"] = context["body"].replace(HIDDEN_LABEL, "<summary>")


def setup(app):
    app.connect("html-page-context", name_summaries_by_their_text)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
