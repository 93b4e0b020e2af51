"""Build the print edition: the book as one PDF (`make pdf`, README "A print edition").

    python pdf/build.py [BOOK] [--out DIR]

BOOK is the book's folder (default: the repository, or a student edition's _build/student/book). The
script merges pdf/_config.yml into BOOK/_config.yml (mappings key by key, lists appended, anything else
replaced), has jupyter-book write the LaTeX with that configuration, runs XeLaTeX through latexmk, and
copies the PDF and the LaTeX log to DIR (default: BOOK/_build/pdf). The HTML build never reads
pdf/_config.yml.
"""

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
NAME = "attention-from-scratch"


def merged(base: dict, extra: dict) -> dict:
    """base updated by extra: mappings merged key by key, lists appended to, anything else replaced."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = out[key] + [item for item in value if item not in out[key]]
        else:
            out[key] = value
    return out


def print_config(book: Path) -> dict:
    """The book's configuration with the print edition's merged in; local extensions' folders absolute."""
    config = merged(yaml.safe_load((book / "_config.yml").read_text()),
                    yaml.safe_load((HERE / "_config.yml").read_text()))
    extensions = config["sphinx"]["local_extensions"]
    for name, folder in extensions.items():
        base = HERE.parent if name == "print_edition" else book  # ours come from this checkout
        extensions[name] = str((base / folder).resolve())
    sphinx = config["sphinx"]["config"]
    sphinx["latex_additional_files"] = [str((HERE.parent / f).resolve()) for f in sphinx["latex_additional_files"]]
    return config


def run(command: list, **kwargs) -> None:
    print("+", " ".join(map(str, command)), flush=True)
    subprocess.run(command, check=True, **kwargs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("book", nargs="?", default=".", type=Path)
    parser.add_argument("--out", type=Path, help="where the PDF goes (default: BOOK/_build/pdf)")
    args = parser.parse_args(argv)
    book = args.book.resolve()
    if not (book / "_config.yml").is_file():
        parser.error(f"book: no _config.yml in {book}")
    out = (args.out or book / "_build" / "pdf").resolve()
    work = book / "_build" / "print"  # its own doctrees: never the HTML build's
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    config = work / "_config.yml"
    config.write_text(yaml.safe_dump(print_config(book), sort_keys=False, allow_unicode=True))
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    run([jupyter_book, "build", book, "--builder", "latex", "--config", config, "--path-output", work,
         "--warningiserror", "--nitpick", "--keep-going"])
    latex = work / "_build" / "latex"
    # latexmk (Sphinx's Makefile) runs XeLaTeX until the references settle; nonstopmode stops on errors.
    run(["make", "-C", latex, "all-pdf", "LATEXMKOPTS=-interaction=nonstopmode -halt-on-error -silent"])
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(latex / f"{NAME}.pdf", out / f"{NAME}.pdf")
    shutil.copy(latex / f"{NAME}.log", out / f"{NAME}.log")
    print(f"The PDF is at {out / f'{NAME}.pdf'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
