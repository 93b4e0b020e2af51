"""Sphinx extension: markup that assistive technology reads right (axe-core finds no serious violation).

Why: MyST-NB writes every hidden cell as `<details><summary aria-label="Toggle hidden content">` around a
visible "Show code cell source". A screen reader then announces a name the reader cannot see, and axe-core
reports it (label-content-name-mismatch, serious). Without the aria-label the summary's name is its
visible text. The theme's search button and colour switch get the same fix in _templates/.

Also: docutils writes the bibliography as a `role="list"` whose entries have the deprecated DPUB role
`doc-biblioentry`, which no longer counts as a list item (axe-core: aria-required-children, critical);
the entries become plain list items.
"""

REPLACEMENTS = {
    '<summary aria-label="Toggle hidden content">': "<summary>",
    'role="doc-biblioentry"': 'role="listitem"',
}


def accessible_markup(app, pagename, templatename, context, doctree):
    body = context.get("body", "")
    for old, new in REPLACEMENTS.items():
        body = body.replace(old, new)
    context["body"] = body


def setup(app):
    app.connect("html-page-context", accessible_markup)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
