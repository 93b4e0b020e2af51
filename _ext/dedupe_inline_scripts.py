"""Sphinx extension: each inline <script> once per page.

Why: sphinx-thebe and sphinx-togglebutton add inline scripts (`app.add_js_file(None, body=...)`) in
`env-before-read-docs`, after the HTML builder exists. Sphinx 7.4 then holds each twice: the builder's
copy with filename None, and the one `prepare_writing` re-adds from the registry with filename ''. Its
duplicate check compares the two filenames and keeps both, so every page declared `const THEBE_JS_URL`
twice, and the browser logged "Identifier 'THEBE_JS_URL' has already been declared".
"""


def _key(script):
    return (script.filename or "", tuple(sorted(script.attributes.items())))


def drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        if _key(script) not in seen:
            seen.add(_key(script))
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    app.connect("html-page-context", drop_duplicate_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
