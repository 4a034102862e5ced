"""The benchmarks are one package, run from the repository root as `python -m bench.NAME`.

Later issues name benchmarks by these module names. The processes a benchmark starts (the stub
upstream, Redis, the proxy) come from `tests.support`, the tests' own, so neither side edits
`sys.path` to reach the other, and nothing starts a file of bench/ by its path (run that way,
its imports of `bench.` and `tests.` would fail).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
BENCHMARKS = (
    "overhead",
    "semantic_latency",
    "quality",
    "calibration",
    "faults",
    "modelserver",
    "redis_search",
    "restart",
    "scale",
    "shared_worker",
    "soak",
)


def trees(*folders: Path) -> list[tuple[Path, ast.Module]]:
    paths = sorted(p for folder in folders for p in folder.rglob("*.py"))
    return [(p, ast.parse(p.read_text(), filename=str(p))) for p in paths]


def test_every_benchmark_is_a_runnable_module_of_the_bench_package() -> None:
    assert (BENCH / "__init__.py").is_file()
    for name in BENCHMARKS:
        tree = ast.parse((BENCH / f"{name}.py").read_text())
        mains = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n)]
        assert mains, f"bench/{name}.py has no `if __name__ == '__main__'`"


def test_neither_bench_nor_tests_edit_sys_path() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path, tree in trees(BENCH, ROOT / "tests")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    ]
    assert offenders == []


def test_no_file_of_bench_is_started_by_its_path() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}"
        for path, tree in trees(BENCH, ROOT / "tests")
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"bench/\w+\.py", node.value)
        and (ROOT / node.value).is_file()
    ]
    assert offenders == []
