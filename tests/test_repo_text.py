"""The repository's text explains itself: no comment, docstring or doc cites a file a maintainer does not have.

Comments and docs say what and why in their own words, or point at a file in this repository (docs/*.md). They
must not cite the design seeds by number, issue-tracker numbers, or paths outside the repository (design
references, a shared folder, a parent directory, a machine's absolute path): none of those travel with the
code. This test scans every text file of the source trees and fails listing `file:line` for each citation.

Words that only look alike stay legal: random seeds (`seed=0`, `manual_seed`, `Tensor.manual_seed`, "seeded by
the case name"), the placement hooks `seed_input` / `seed_constant` / `seed_never_virtual` (they seed a node's
declared placement), and names the design gave to code (`prepare_rangeify`, `tiny_jit`, `Placements`, ...).

The patterns are assembled from pieces below, so this file does not match them itself and is scanned like any
other.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREES = ("tolk_core", "plugins", "tests", "docs", "examples", "bench")
TOP_FILES = ("README.md", "pyproject.toml", ".importlinter")  # not the Makefile: its recipes cd into subfolders
SUFFIXES = {".py", ".md", ".toml", ".cfg", ".ini", ".txt"}
SKIP_DIRS = {"__pycache__", "build", "dist", "node_modules"}

_SEED, _ISSUE = "se" + "ed", "iss" + "ue"
CITATIONS: dict[str, re.Pattern[str]] = {
    # a design seed by number (the word, then a three-digit number starting with 0)
    "seed number": re.compile(rf"\b{_SEED}s?[\s_]*0\d\d\b", re.I),
    # the seed as a source: its possessive, a parenthesised tag, "follows/obeys the ...", its bullets/form/misses
    "seed citation": re.compile(rf"\bthe {_SEED}'s\b|(?<![\w.])\({_SEED}[:)]"
                                rf"|(?<![a-z])(?:follows?|obeys?)[ _]the[ _]{_SEED}(?![a-z])"
                                rf"|\b{_SEED} (?:bullets?|form|miss)\b", re.I),
    # an issue-tracker number: the word and a number, or a hash sign and a number in prose
    "issue number": re.compile(rf"\b{_ISSUE}s?\s*#?\d+\b|(?<![\w&#/'\"{{])#\d+\b", re.I),
    # a path outside the repository, or the design notes that live there
    "outside path": re.compile(r"\b" + "refer" + r"ence/|\b" + "sha" + r"red/|\b" + "DES" + r"IGN\b|\.\./|/"
                               + "wo" + r"rk/"),
    # the project the design references draw on, cited for a choice ("following ...'s")
    "design source": re.compile(r"\b" + "OCA" + r"NNL\b"),
}

def _text_files() -> list[Path]:
    files = [ROOT / name for name in TOP_FILES if (ROOT / name).is_file()]
    for tree in TREES:
        for dirpath, dirnames, filenames in os.walk(ROOT / tree):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")
                                 and not d.endswith(".egg-info"))
            files += [Path(dirpath) / f for f in sorted(filenames) if Path(f).suffix in SUFFIXES]
    return files


def citations(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line: [kind] text` for every line of `path` that cites something outside the repository (`file`
    relative to `root`)."""
    rel = path.relative_to(root).as_posix()
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        out += [f"{rel}:{n}: [{kind}] {line.strip()}" for kind, pat in CITATIONS.items() if pat.search(line)]
    return out


def test_no_text_cites_what_the_repository_lacks() -> None:
    files = _text_files()
    assert len(files) > 100 and ROOT / "tolk_core/schedule/prepare.py" in files  # the walk found the trees
    found = [c for f in files for c in citations(f)]
    assert not found, "say what and why, or point at a docs/ file, instead of citing:\n" + "\n".join(found)


# planted citations, written with a "|" that is removed before matching (so this file stays clean itself)
PLANTED = [
    ("see s|eed 001 for why", "seed number"),
    ("SEED_|002 placements", "seed number"),
    ("# the s|eed's bullet 3", "seed citation"),
    ('"""The JIT wrapper (s|eed: tiny_jit)."""', "seed citation"),
    ("def test_code_call_arguments_follow_the_s|eed():", "seed citation"),
    ("Targets (iss|ue 8): per-kernel", "issue number"),
    ("fixed in #|42, see there", "issue number"),
    ("Order (refer|ence/placements.md, section 8)", "outside path"),
    ("; guard rails (DES|IGN.md, section 1)", "outside path"),
    ("open /wo|rk/x.md", "outside path"),
    ("as in .|./notes.md", "outside path"),
    ("codes follow OCA|NNL's where the meaning matches", "design source"),
]
LEGAL = [
    "def manual_seed(seed: int = 0) -> None:",
    "Tensor.manual_seed(1234); rng = np.random.default_rng(seed=0)",
    "placements.seed_input(u); placements.seed_constant(out); pm.seed_never_virtual(t.uop)",
    "masks are reproducible from the seed, differ per call",
    "Inputs come from a generator seeded by the case name",
    "d(root)/d(target) ... seeded with `root_grad`; backward(root, seed=None)",
    "#include <math.h>  // and #define N 4",
    "    x = y  # 2 elements, then #pragma omp parallel for",
    "see docs/placements.md and tests/schedule/test_placements.py",
    "it issues a warning",
    "element i of a draw is a hash of (seed, counter, i)",
]


@pytest.mark.parametrize("line, kind", PLANTED)
def test_a_planted_citation_is_found(tmp_path, line, kind) -> None:
    planted = line.replace("|", "")
    assert CITATIONS[kind].search(planted), planted
    f = tmp_path / "planted.py"
    f.write_text("x = 1  # a clean line\n" + planted + "\n")
    assert citations(f, tmp_path) == [f"planted.py:2: [{kind}] {planted.strip()}"]


@pytest.mark.parametrize("line", LEGAL)
def test_legal_words_are_not_citations(line) -> None:
    assert not [kind for kind, pat in CITATIONS.items() if pat.search(line)], line
