"""Check a built wheel and sdist the way an index and an installer will read them.

    python scripts/check_dist.py dist/firsttoken-X-py3-none-any.whl dist/firsttoken-X.tar.gz

PEP 639 license metadata (``License-Expression``, ``License-File``) in both, the LICENSE text inside
both and equal to the repository's, the version from ``src/firsttoken/_version.py``, the Python
requirement and classifiers from pyproject.toml, the package's modules and ``py.typed`` in the
wheel and no tests in it, the entry points. Exits 1 with every problem listed.
"""

from __future__ import annotations

import ast
import email.parser
import sys
import tarfile
import zipfile
from email.message import Message
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _version() -> str:
    tree = ast.parse((ROOT / "src" / "firsttoken" / "_version.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "__version__":
            return str(ast.literal_eval(node.value))
    raise SystemExit("check_dist: no __version__ in src/firsttoken/_version.py")


def _pyproject() -> dict[str, object]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    with open(ROOT / "pyproject.toml", "rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def _metadata(text: str) -> Message:
    return email.parser.Parser().parsestr(text)


def check_metadata(where: str, meta: Message, problems: list[str]) -> None:
    version = _version()
    project = _pyproject()
    expected = {
        "Name": "firsttoken",
        "Version": version,
        "License-Expression": "Apache-2.0",
        "Requires-Python": project["requires-python"],
    }
    for field, value in expected.items():
        if meta.get(field) != value:
            problems.append(f"{where}: {field} is {meta.get(field)!r}, expected {value!r}")
    metadata_version = tuple(int(p) for p in str(meta.get("Metadata-Version", "0")).split("."))
    if metadata_version < (2, 4):
        problems.append(f"{where}: Metadata-Version {meta.get('Metadata-Version')} predates PEP 639 (2.4)")
    if meta.get_all("License-File") != ["LICENSE"]:
        problems.append(f"{where}: License-File is {meta.get_all('License-File')}, expected ['LICENSE']")
    if meta.get("License"):
        problems.append(f"{where}: the legacy License field is set next to License-Expression")
    classifiers = meta.get_all("Classifier") or []
    if classifiers != project["classifiers"]:
        problems.append(f"{where}: classifiers {classifiers} differ from pyproject.toml's")
    if any(c.startswith("License ::") for c in classifiers):
        problems.append(f"{where}: a License classifier next to License-Expression (PEP 639 deprecates them)")
    if not (meta.get_payload() or "").strip():
        problems.append(f"{where}: no long description (the README)")


def check_wheel(path: Path, license_text: bytes, problems: list[str]) -> None:
    version = _version()
    info = f"firsttoken-{version}.dist-info"
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
        check_metadata(path.name, _metadata(wheel.read(f"{info}/METADATA").decode()), problems)
        licence = f"{info}/licenses/LICENSE"
        if licence not in names:
            problems.append(f"{path.name}: no {licence}")
        elif wheel.read(licence) != license_text:
            problems.append(f"{path.name}: {licence} differs from the repository's LICENSE")
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
        for needed in (
            "firsttoken = firsttoken.cli:main",
            "firsttoken = firsttoken.instrumentor:FirstTokenInstrumentor",
        ):
            if needed not in entry_points:
                problems.append(f"{path.name}: entry point {needed!r} missing")
    source = {
        str(p.relative_to(ROOT / "src"))
        for p in (ROOT / "src" / "firsttoken").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    missing = sorted(source - names)
    if missing:
        problems.append(f"{path.name}: package files missing: {missing}")
    extra = sorted(n for n in names if not n.startswith(("firsttoken/", info)))
    if extra:
        problems.append(f"{path.name}: files outside the package: {extra[:10]}")


def check_sdist(path: Path, license_text: bytes, problems: list[str]) -> None:
    top = f"firsttoken-{_version()}"
    with tarfile.open(path) as sdist:
        names = set(sdist.getnames())
        needed_files = ("PKG-INFO", "LICENSE", "pyproject.toml", "README.md", "CHANGELOG.md")
        for needed in (*needed_files, "src/firsttoken/__init__.py"):
            if f"{top}/{needed}" not in names:
                problems.append(f"{path.name}: no {top}/{needed}")
        member = sdist.extractfile(f"{top}/PKG-INFO")
        if member is not None:
            check_metadata(path.name, _metadata(member.read().decode()), problems)
        member = sdist.extractfile(f"{top}/LICENSE") if f"{top}/LICENSE" in names else None
        if member is not None and member.read() != license_text:
            problems.append(f"{path.name}: LICENSE differs from the repository's")
        for name in names:
            parts = name.split("/")
            if any(p in (".venv", ".git", "__pycache__", ".release", ".venv-compat") for p in parts):
                problems.append(f"{path.name}: holds {name}")
                break


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    license_text = (ROOT / "LICENSE").read_bytes()
    problems: list[str] = []
    check_wheel(Path(argv[0]), license_text, problems)
    check_sdist(Path(argv[1]), license_text, problems)
    for problem in problems:
        print(f"check_dist: {problem}", file=sys.stderr)
    if not problems:
        print(f"    metadata ok: {Path(argv[0]).name}, {Path(argv[1]).name}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
