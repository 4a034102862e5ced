"""deploy/Dockerfile and .dockerignore read as docker reads them, for the deployment checks.

Only the instructions our Dockerfile uses are understood (FROM, ENV, WORKDIR, COPY, RUN, USER,
EXPOSE, HEALTHCHECK, CMD); an unknown one fails the parse, so a new instruction cannot slip
past the checks unread.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

_KNOWN = {"FROM", "ENV", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "HEALTHCHECK", "CMD"}


@dataclass(frozen=True, slots=True)
class Copy:
    sources: tuple[str, ...]  # relative to the build context
    destination: str  # absolute, in the image


@dataclass(slots=True)
class Image:
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    copies: list[Copy] = field(default_factory=list)
    user: str = "root"
    cmd: list[str] = field(default_factory=list)
    healthcheck: str = ""
    runs: list[str] = field(default_factory=list)

    def folders(self) -> dict[str, Path]:
        """Each folder of the image that a COPY filled from a folder of this checkout."""
        return {
            copy.destination.rstrip("/"): ROOT / copy.sources[0]
            for copy in self.copies
            if len(copy.sources) == 1 and (ROOT / copy.sources[0]).is_dir()
        }

    def host_path(self, image_path: str) -> Path | None:
        """The build-context file that `image_path` in the image was copied from, if any.

        As COPY does: a folder's contents go to the destination, a file to the destination
        (or into it, when it ends in `/`); a later COPY overwrites an earlier one."""
        for copy in reversed(self.copies):
            for source in copy.sources:
                if (ROOT / source).is_dir():
                    base = copy.destination.rstrip("/")
                    if image_path == base or image_path.startswith(base + "/"):
                        found = ROOT / source / posixpath.relpath(image_path, base)
                        if found.exists():
                            return found
                elif image_path == _file_target(source, copy.destination):
                    return ROOT / source
        return None


def _file_target(source: str, destination: str) -> str:
    if destination.endswith("/"):
        return destination + posixpath.basename(source)
    return destination


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not _comment(ln)))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def parse_dockerfile(text: str) -> Image:
    image = Image()
    for word, rest in _instructions(text):
        assert word in _KNOWN, f"the deployment checks do not understand {word} yet"
        if word == "ENV":
            for item in shlex.split(rest):
                name, sep, value = item.partition("=")
                assert sep, f"ENV {rest!r}: write ENV NAME=value"
                image.env[name] = value
        elif word == "WORKDIR":
            image.workdir = posixpath.join(image.workdir, rest)
        elif word == "COPY":
            words = [w for w in shlex.split(rest) if not w.startswith("--")]
            sources, dest = words[:-1], words[-1]
            # Several sources need a folder; a trailing slash makes one.
            folder = dest.endswith("/") or len(sources) > 1
            dest = posixpath.normpath(posixpath.join(image.workdir, dest))
            dest = dest.rstrip("/") + "/" if folder else dest
            image.copies.append(Copy(tuple(w.rstrip("/") for w in sources), dest))
        elif word == "USER":
            image.user = rest
        elif word == "CMD":
            image.cmd = json.loads(rest)
        elif word == "HEALTHCHECK":
            image.healthcheck = rest
        elif word == "RUN":
            image.runs.append(rest)
    return image


def image() -> Image:
    return parse_dockerfile(DOCKERFILE.read_text())


def installed_top_level(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The top-level packages and modules `pip install .` puts in the image, read from
    pyproject.toml as setuptools reads it (an explicit list, or `packages.find`'s include)."""
    data = tomllib.loads(pyproject.read_text())
    tool = data.get("tool", {}).get("setuptools", {})
    names = {m for m in tool.get("py-modules", [])}
    packages = tool.get("packages", {})
    if isinstance(packages, list):
        return sorted(names | {p.split(".")[0] for p in packages})
    find = packages.get("find", {})
    where = pyproject.parent / find.get("where", ["."])[0]
    include = find.get("include", ["*"])
    exclude = find.get("exclude", [])
    for folder in where.iterdir():
        if not (folder / "__init__.py").is_file():
            continue
        if any(fnmatch.fnmatchcase(folder.name, p) for p in include) and not any(
            fnmatch.fnmatchcase(folder.name, p) for p in exclude
        ):
            names.add(folder.name)
    return sorted(names)


@dataclass(frozen=True, slots=True)
class IgnoreRule:
    pattern: re.Pattern[str]
    negated: bool


def parse_dockerignore(text: str) -> list[IgnoreRule]:
    """Docker's rules: one pattern a line, `#` comments, `!` re-includes, `**` any depth,
    a pattern matching a folder excludes what is in it, and the last matching rule wins."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        path = posixpath.normpath(line.lstrip("!").strip().lstrip("/"))
        rules.append(IgnoreRule(re.compile(_glob_regex(path)), negated))
    return rules


def _glob_regex(glob: str) -> str:
    out = []
    for part in re.split(r"(\*\*/?|\*|\?)", glob):
        if part == "**/":
            out.append("(.*/)?")
        elif part == "**":
            out.append(".*")
        elif part == "*":
            out.append("[^/]*")
        elif part == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(part))
    return "".join(out) + "$"


def is_ignored(path: str, rules: list[IgnoreRule]) -> bool:
    """Whether `path` (relative to the build context) stays out of the build context."""
    parts = path.strip("/").split("/")
    ignored = False
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        for rule in rules:
            if rule.pattern.match(prefix):
                ignored = not rule.negated
    return ignored
