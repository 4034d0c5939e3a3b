#!/usr/bin/env python3
"""What a sync server gets from the client's package (Client/), read from SwiftPM's JSON; used by
scripts/check-example.sh.

  client-graph.py resolved < show-dependencies.json   every package resolved, one identity a line
  client-graph.py edges < dump-package.json           the package's module edges, as docs/integrating.md shows them
"""
import json
import sys


def resolved(root):
    seen = set()

    def walk(node):
        for dep in node.get("dependencies", []):
            seen.add(dep["identity"])
            walk(dep)

    walk(root)
    return sorted(seen)


def edges(manifest):
    # Top-down: the manifest declares a module after those it depends on.
    lines = []
    for target in reversed(manifest["targets"]):
        if target["type"] == "system":
            lines.append(f"{target['name']} ──► {target['pkgConfig']} (a system library, through pkg-config)")
            continue
        modules, packages = [], []
        for dep in target["dependencies"]:
            kind, value = next(iter(dep.items()))
            if kind == "product":
                packages.append(value[1])
            else:
                modules.append(value[0])
        libraries = [s["kind"]["linkedLibrary"]["_0"] for s in target.get("settings", []) if "linkedLibrary" in s["kind"]]
        tail = ", ".join(modules) if modules else "the standard library only"
        extras = sorted(set(packages)) + [f"lib{name}" for name in libraries]
        if extras:
            tail += f" (+ {', '.join(extras)})"
        lines.append(f"{target['name']} ──► {tail}")
    return lines


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    data = json.load(sys.stdin)
    if mode == "resolved":
        print("\n".join(resolved(data)))
    elif mode == "edges":
        print("\n".join(edges(data)))
    else:
        sys.exit(__doc__)
