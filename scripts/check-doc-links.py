"""Every link between the docs resolves: each `](path)` and `](path#anchor)` of README.md and
docs/**/*.md names a file that exists and, for a Markdown file, a heading it has (anchors as
GitHub makes them: lower case, punctuation dropped, spaces as hyphens, repeats numbered).
  python3 scripts/check-doc-links.py      (from the repository's root; exit 1 on a broken link)
"""
import glob
import os
import re
import sys


def slug(heading):
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path):
    found, counts, fenced = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else re.match(r"#{1,6} (.*)", line)
        if match:
            base = slug(match.group(1))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


broken = 0
for doc in ["README.md"] + sorted(glob.glob("docs/**/*.md", recursive=True)):
    text = open(doc, encoding="utf-8").read()
    for match in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = match.group(1)
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        if not os.path.exists(resolved):
            print(f"check-doc-links: {doc}: no file {target}", file=sys.stderr)
            broken += 1
        elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
            print(f"check-doc-links: {doc}: no heading for {target}", file=sys.stderr)
            broken += 1
if broken:
    sys.exit(1)
print("check-doc-links: every link between the docs resolves")
