#!/usr/bin/env bash
# Checks the project's documents: README.md, ARCHITECTURE.md, BENCHMARKS.md and docs/*.md.
#
#   scripts/check-doc-links.sh
#
# - every relative link and image points at a file inside the repository, and every #anchor
#   (in the same file or another .md file) at a heading there (GitHub's heading ids);
# - no link leaves the repository's tree, and no document names a path on this machine (/work/);
# - no "session N" wording outside docs/benchmarks-history.md, which holds the history.
# Links inside code blocks and code spans are not links and are skipped; http(s) links are not
# fetched. Prints one line per problem and exits 1 if there is any.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - README.md ARCHITECTURE.md BENCHMARKS.md docs/*.md <<'EOF'
import os, re, sys, unicodedata

root = os.path.realpath(".")
history = os.path.join("docs", "benchmarks-history.md")
link = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
problems = []


def strip_code(text):
    """The text with fenced blocks and code spans blanked (line numbers kept)."""
    out, fence = [], None
    for line in text.split("\n"):
        marker = re.match(r"^\s*(```+|~~~+)", line)
        if fence:
            if marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
                fence = None
            out.append("")
            continue
        if marker:
            fence = marker.group(1)
            out.append("")
            continue
        out.append(re.sub(r"(`+)(?:(?!\1).)+?\1", "", line))
    return out


def slug(heading):
    """GitHub's id for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LN" or cat == "Mn":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


anchors_of = {}


def anchors(path):
    if path not in anchors_of:
        seen, ids = {}, set()
        for line in strip_code(open(path, encoding="utf-8").read()):
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            ids.add(base if n == 0 else f"{base}-{n}")
        anchors_of[path] = ids
    return anchors_of[path]


for doc in sys.argv[1:]:
    text = open(doc, encoding="utf-8").read()
    lines = strip_code(text)
    for number, line in enumerate(text.split("\n"), 1):
        if "/work/" in line:
            problems.append(f"{doc}:{number}: names a path on this machine (/work/)")
        if doc != history and re.search(r"\bsessions? \d+", line, re.IGNORECASE):
            problems.append(f"{doc}:{number}: 'session N' wording (history belongs in {history})")
    for number, line in enumerate(lines, 1):
        for target in link.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # http:, https:, mailto: — not checked here
            path, _, anchor = target.partition("#")
            if path.startswith("/"):
                problems.append(f"{doc}:{number}: absolute link {target}")
                continue
            resolved = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            real = os.path.realpath(resolved)
            if real != root and not real.startswith(root + os.sep):
                problems.append(f"{doc}:{number}: {target} leaves the repository")
                continue
            if not os.path.exists(resolved):
                problems.append(f"{doc}:{number}: {target}: no file {resolved}")
                continue
            if anchor:
                if not resolved.endswith(".md"):
                    problems.append(f"{doc}:{number}: {target}: an anchor into a file that is not Markdown")
                elif anchor not in anchors(resolved):
                    problems.append(f"{doc}:{number}: {target}: no heading #{anchor} in {resolved}")

for p in problems:
    print(p)
checked = len(sys.argv) - 1
if problems:
    print(f"check-doc-links: {len(problems)} problem(s) in {checked} documents")
    sys.exit(1)
print(f"check-doc-links: {checked} documents, every link and anchor resolves")
EOF
