"""No pipeline in a `set -o pipefail` script ends in a reader that may leave early, unless its failure is meant.

`tail LOG | grep -q LINE` under pipefail fails although LINE is there: grep -q leaves at its first match, tail's
next write dies of SIGPIPE (exit 141), and pipefail makes that the pipeline's status. CI's Debian 13 fresh-check
failed so on 2026-11-28 ("did not put the lab on Incus" with `= lab local on Incus` in its log): it depends on how
the writer's chunks and the reader's exit interleave, so it passed alone and failed beside a second check. The same
holds for `head` and `grep -m`. Here every bash script of the repo that sets pipefail is read, and such a reader
after a pipe must be followed by `|| true` on its line (an empty answer is handled after), or the input must come
from a here-string or a file instead (the fix used: read the text once, then `grep -q ... <<<"$text"`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# a pipe (not the `||` operator) into grep -q / grep -m / head
EARLY_READER = re.compile(r"(?<!\|)\|(?!\|)\s*(?:grep\s+-[A-Za-z]*[qm][A-Za-z]*\b|head\b)")
# quoted words: a pattern's `|`, `)` or `;` is no operator, and a command handed to another shell as one string
# (`sh -c "a | grep -q b"`) runs without pipefail
QUOTED = re.compile(r"'[^']*'" + r'|"(?:\\.|[^"\\])*"')
# what ends a pipeline: its status is then judged (&&, ||, ;, the end of a $( ) or of the line)
PIPELINE_END = re.compile(r"&&|\|\||;|\)|$")


def bash_scripts() -> list[Path]:
    found = [REPO / ".ci" / "run"]
    for folder in (REPO / "scripts", REPO / "src" / "labwright" / "data"):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.stat().st_size < 1_000_000:
                head = path.read_bytes()[:64]
                if head.startswith(b"#!") and b"bash" in head.split(b"\n")[0]:
                    found.append(path)
    return found


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, the line with its continuations joined); comments dropped."""
    lines, joined, start = [], "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if not joined:
            start = number
        if line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            joined += line[:-1] + " "
            continue
        lines.append((start, joined + line))
        joined = ""
    return lines


def early_readers(text: str) -> list[tuple[int, str]]:
    found = []
    for number, line in logical_lines(text):
        code = QUOTED.sub("Q", line)
        for match in EARLY_READER.finditer(code):
            rest = code[match.end():]
            end = PIPELINE_END.search(rest)
            after = rest[end.start():] if end else ""
            if not re.match(r"\|\|\s*(true|:)\b", after):  # its status must be let go, not judged
                found.append((number, line.strip()))
    return found


def test_the_scripts_are_found():
    names = {path.name for path in bash_scripts()}
    assert {"run", "fresh-check", "setup", "test", "bootstrap", "wheel-check"} <= names, names


@pytest.mark.parametrize("path", bash_scripts(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_pipefail_script_ends_a_pipe_in_a_reader_that_leaves_early(path: Path):
    text = path.read_text()
    if "pipefail" not in text:
        return
    assert early_readers(text) == [], f"{path.relative_to(REPO)}: read into a variable first, or add '|| true'"


def test_the_scan_finds_the_pipes_it_is_about():
    """The scan itself: the forms that failed are found, the fixed forms and other shells' strings are not."""
    assert early_readers('tail -n "+$from" "$LOG" | grep -q "✓ lab ready" || die "no"\n')
    assert early_readers("tail LOG \\\n  | grep -qE '^lab' \\\n  || die x\n")
    assert early_readers("x=$(ls a | head -n 1)\n")
    assert not early_readers("x=$(ls a | head -n 1 || true)\n")
    assert not early_readers("grep -q 'lab ready' <<<\"$ran\" || die x\n")
    assert not early_readers("in_c sh -c \"ip addr | grep -q 'inet ' && true\"\n")
    assert not early_readers("# tail | grep -q in a comment\n")
    assert not early_readers("[ -z \"$a\" ] || grep -q x <<<\"$a\"\n")  # the || operator, not a pipe
    # a later `|| true` of another command does not let this pipeline go (scripts/setup's incus check had one)
    assert early_readers("if printf '%s' \"$x\" | grep -qE '^a(\\||$)' && ! grep -q b <<<\"$(c || true)\"; "
                         "then :; fi\n")


def test_the_failure_is_real_and_the_fix_holds():
    """bash itself: a writer longer than a pipe's buffer and `grep -q` finding the first line fails the pipeline
    under pipefail (141, SIGPIPE); the same search over a here-string of the same text does not."""
    broken = subprocess.run(["bash", "-c", "set -o pipefail; seq 1 300000 | grep -q '^1$'"], check=False)
    assert broken.returncode == 141
    fixed = subprocess.run(["bash", "-c", "set -o pipefail; text=$(seq 1 300000); grep -q '^1$' <<<\"$text\""],
                           check=False)
    assert fixed.returncode == 0
