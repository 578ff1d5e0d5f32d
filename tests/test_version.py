"""One version: ``firsttoken.__version__``, the installed metadata and ``firsttoken --version`` agree,
and the changelog has a section for it (or an Unreleased one on the way to it)."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import firsttoken

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_has_one_source() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?", firsttoken.__version__)
    assert metadata.version("firsttoken") == firsttoken.__version__, "built from src/firsttoken/_version.py"
    result = subprocess.run(
        [sys.executable, "-m", "firsttoken.cli", "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == f"firsttoken {firsttoken.__version__}"


def test_the_changelog_has_a_section_for_the_next_or_current_release() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\]", changelog, flags=re.MULTILINE)
    assert headings, "release sections: ## [Unreleased], ## [0.1.0] - date, ..."
    assert headings[0] in ("Unreleased", firsttoken.__version__), headings[0]
    released = [h for h in headings if h != "Unreleased"]
    assert len(released) == len(set(released)), "one section per release"
