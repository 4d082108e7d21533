"""Prints a harness (tests/readme/*.in) with the README's Quick start snippet
for one language spliced in where the harness has a line `SNIPPET`: the
snippet is the README's own text, not a copy, so a README that stops
compiling or working fails the test.

    python3 tests/readme/extract.py go tests/readme/main.go.in > main.go

`--replace OLD NEW` (repeatable) swaps text in the snippet where a test
cannot use it as is (a fixed port). A harness with a line `INCLUDES` gets
the snippet's `#include` lines there (C and C++ fragments)."""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def snippet(language: str) -> str:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```" + re.escape(language) + r"\n(.*?)^```$", readme, re.M | re.S)
    if not blocks:
        sys.exit(f"README.md has no ```{language} block")
    return blocks[0]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("language")
    p.add_argument("harness")
    p.add_argument("--replace", nargs=2, action="append", default=[], metavar=("OLD", "NEW"))
    a = p.parse_args()
    text = snippet(a.language)
    for old, new in a.replace:
        if old not in text:
            sys.exit(f"the README's {a.language} snippet no longer has {old!r}")
        text = text.replace(old, new)
    harness = pathlib.Path(a.harness).read_text()
    lines = harness.splitlines(keepends=True)
    at = [i for i, l in enumerate(lines) if l.strip() == "SNIPPET"]
    if len(at) != 1:
        sys.exit(f"{a.harness}: needs exactly one line SNIPPET")
    includes = [i for i, l in enumerate(lines) if l.strip() == "INCLUDES"]
    if includes:
        # A C or C++ fragment: its #include lines go to file scope, the
        # rest into the harness's function.
        kept = text.splitlines(keepends=True)
        hoisted = "".join(l for l in kept if l.startswith("#include"))
        text = "".join(l for l in kept if not l.startswith("#include"))
        lines[includes[0]] = hoisted
    lines[at[0]] = text
    sys.stdout.write("".join(lines))


if __name__ == "__main__":
    main()
