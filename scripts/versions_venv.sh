#!/usr/bin/env bash
# Build (once) the virtual environment of one version set for `make versions`:
#   scripts/versions_venv.sh version-sets/colab-default.txt   -> .venv-versions/colab-default
# A set file names the Python (`python=3.13`: pyenv's newest 3.13.x, else python3.13 on PATH) and pins
# requirements; the package is installed editable with its `tf` and `transformers` extras, without
# requirements.txt's pins,
# so pip fills in the rest as a reader's `pip install` would. The stamp holds the set's hash: editing
# the set rebuilds its venv.
set -euo pipefail
set_file=$1
name=$(basename "$set_file" .txt)
venv=.venv-versions/$name
stamp=$venv/.installed
hash=$(sha256sum "$set_file" | cut -c1-16)  # the set alone: the package is installed editable
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then exit 0; fi
py=$(sed -n 's/^python=//p' "$set_file")
interpreter=""
if command -v pyenv >/dev/null; then  # pyenv's own copy first: its shims on PATH may not resolve
  found=$(pyenv versions --bare | grep -E "^$py(\.[0-9]+)?$" | tail -1 || true)
  [ -z "$found" ] || interpreter=$(pyenv root)/versions/$found/bin/python
fi
[ -n "$interpreter" ] || interpreter=$(command -v "python$py" || true)
[ -n "$interpreter" ] || { echo "no Python $py for $set_file (install it with pyenv)" >&2; exit 1; }
rm -rf "$venv"
start=$(date +%s)
"$interpreter" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
grep -v -E '^(#|python=|$)' "$set_file" > "$venv/pins.txt"
# The set's pins, the package with its TensorFlow extra, and what nbval needs to run a notebook; ipywidgets
# as Colab has it (without it tqdm.auto warns on stderr in a kernel).
"$venv/bin/python" -m pip install -q -r "$venv/pins.txt" -e ".[tf,transformers]" "nbval==0.11.0" pytest ipykernel ipywidgets pyyaml \
  2> >(grep -v -E "^WARNING: Location .* is ignored" >&2)
"$venv/bin/python" -m pip check
"$venv/bin/python" -m pip freeze --exclude-editable > "$venv/freeze.txt"
echo "$name: built in $(( $(date +%s) - start )) s with $("$venv/bin/python" --version)"
echo "$hash" > "$stamp"
