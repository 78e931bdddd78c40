"""docs/errors.md runs: its `python` blocks execute in order in one namespace; a block marked `raises=Name`
raises that class, with the message of the `text` block after it (`...` standing for machine-dependent text).
Every class of tolk_core/errors.py has its section and a place in the hierarchy, and every error class (not the
warnings) a raising example."""
from __future__ import annotations

import inspect
import re

import pytest

from tests.conformance.helpers import REPO, fenced_blocks
from tolk_core import errors

DOC = (REPO / "docs" / "errors.md").read_text()
CLASSES = sorted(name for name, c in vars(errors).items()
                 if inspect.isclass(c) and issubclass(c, Exception) and c.__module__ == errors.__name__)


def message_pattern(text: str) -> re.Pattern[str]:
    """The documented message as a pattern: literal, but `...` matches any text (lines included)."""
    return re.compile(".*".join(re.escape(part) for part in text.strip().split("...")), re.S)


def examples() -> list[tuple[str, dict[str, str], str, str | None]]:
    """(language, info, body, the documented message of a raising block or None) of every python block."""
    blocks = fenced_blocks(DOC)
    out = []
    for i, (lang, info, body) in enumerate(blocks):
        if lang == "python":
            after = blocks[i + 1] if i + 1 < len(blocks) else None
            out.append((lang, info, body, after[2] if "raises" in info and after and after[0] == "text" else None))
    return out


def test_every_error_class_is_documented() -> None:
    assert len(CLASSES) >= 20
    raised = {info["raises"] for _, info, _, _ in examples() if "raises" in info}
    tree = next(body for lang, _, body in fenced_blocks(DOC) if lang == "text" and "└── TolkError" in body)
    for name in CLASSES:
        assert f"\n### {name}\n" in DOC, f"docs/errors.md has no section for {name}"
        assert name in raised or issubclass(getattr(errors, name), Warning), \
            f"docs/errors.md has no example raising {name}"
        std = ", ".join(b.__name__ for b in getattr(errors, name).__bases__[1:])  # the standard base, if any
        entry = f"── {name} ({std})\n" if std else f"── {name}\n"
        assert entry in tree, f"docs/errors.md's hierarchy lacks {entry.strip()!r}"


def test_examples_raise_what_they_say(tolk_env) -> None:
    ns: dict = {}
    ran = 0
    for _, info, body, message in examples():
        if "raises" not in info:
            exec(compile(body, "docs/errors.md", "exec"), ns)
            continue
        cls = getattr(errors, info["raises"])
        with pytest.raises(cls) as e:
            exec(compile(body, f"docs/errors.md ({info['raises']})", "exec"), ns)
        assert message is not None, f"the {info['raises']} example has no message block after it"
        assert message_pattern(message).fullmatch(str(e.value)), \
            f"{info['raises']}: documented\n{message}\nbut raised\n{e.value}"
        ran += 1
    assert ran >= sum(not issubclass(getattr(errors, name), Warning) for name in CLASSES)
