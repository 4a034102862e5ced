"""deploy/Dockerfile and .dockerignore: the image holds every package the project installs, the
build context leaves out what it does not need, and the image's cache directory is the model
server's."""

from __future__ import annotations

import re
from pathlib import Path

from tests.deploy.dockerfile import (
    DOCKERFILE,
    DOCKERIGNORE,
    ROOT,
    Image,
    image,
    installed_top_level,
    is_ignored,
    parse_dockerfile,
    parse_dockerignore,
)
from tests.deploy.listeners import modelserver_config


def missing_packages(built: Image) -> list[str]:
    """The installed top-level packages whose files the image lacks at its WORKDIR, where
    `pip install .` looks for them."""
    missing = []
    for name in installed_top_level():
        local = ROOT / name / "__init__.py"
        if built.host_path(f"{built.workdir}/{name}/__init__.py") != local:
            missing.append(name)
    return missing


def test_the_image_copies_every_package_the_project_installs() -> None:
    assert installed_top_level() == [
        "core", "fallback", "modelserver", "normalize", "proxy", "tiers"
    ]  # fmt: skip
    built = image()
    assert missing_packages(built) == []
    # pip install . also reads these; the CMD reads the config.
    for needed in ("pyproject.toml", "README.md", "constraints.txt", "config/deja.yaml"):
        assert built.host_path(f"{built.workdir}/{needed}") == ROOT / needed, needed


def test_the_package_check_notices_a_package_left_out() -> None:
    text = DOCKERFILE.read_text().replace("COPY fallback fallback\n", "")
    assert missing_packages(parse_dockerfile(text)) == ["fallback"]


def test_the_build_context_leaves_out_the_virtual_environment_git_and_caches() -> None:
    rules = parse_dockerignore(DOCKERIGNORE.read_text())
    for path in (".venv/lib/python3.11/site-packages/torch/__init__.py", ".git/HEAD",
                 "bench/results/latency.json", "core/__pycache__/config.cpython-311.pyc",
                 ".mypy_cache/3.11/core", "deja.egg-info/PKG-INFO", "tests/unit"):  # fmt: skip
        assert is_ignored(path, rules), path


def test_nothing_the_dockerfile_copies_is_left_out_of_the_build_context() -> None:
    rules = parse_dockerignore(DOCKERIGNORE.read_text())
    for copy in image().copies:
        for source in copy.sources:
            paths = [ROOT / source]
            if paths[0].is_dir():
                paths += [p for p in paths[0].rglob("*") if "__pycache__" not in p.parts]
            for path in paths:
                relative = path.relative_to(ROOT).as_posix()
                assert not is_ignored(relative, rules), f"COPY {source}: {relative} is ignored"


def test_the_ignore_rules_read_as_dockers() -> None:
    rules = parse_dockerignore(
        "# a comment\n.venv\n**/__pycache__\ntests\n!tests/keep\n*.egg-info\n"
    )
    assert is_ignored(".venv/bin/python", rules) and is_ignored("a/b/__pycache__/c.pyc", rules)
    assert is_ignored("tests/unit/x.py", rules) and not is_ignored("tests/keep/x.py", rules)
    assert is_ignored("deja.egg-info", rules) and not is_ignored("core/deja.egg-info.py", rules)
    assert not is_ignored("core/config.py", rules) and not is_ignored("bench/x.py", rules)


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    # Numeric: Kubernetes' runAsNonRoot can only check a numeric USER.
    uid, _, gid = image().user.partition(":")
    assert re.fullmatch(r"\d+", uid) and int(uid) != 0, image().user
    assert gid == "" or int(gid) != 0


def test_the_cache_directory_the_image_sets_is_where_the_model_server_writes() -> None:
    built = image()
    cache_dir = modelserver_config(["deja", "modelserver"], built.env).cache_dir
    assert cache_dir == Path(built.env["DEJA_MODEL_CACHE_DIR"]) and cache_dir.is_absolute()
    # Created and owned by the image's user, or the server could not write it (and a named
    # volume mounted there would copy the ownership of an empty root folder).
    runs = " ".join(built.runs)
    assert f"mkdir -p {cache_dir}" in runs
    owners = re.findall(r"chown -R (\S+) (\S+)", runs)
    assert any(o == built.user and str(cache_dir).startswith(p) for o, p in owners), owners
