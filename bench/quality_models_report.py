"""The side-by-side table of `bench.quality --model minilm,mpnet,two-stage`: each mode at the
shipped threshold (semantic.threshold on the reference scale), per set, with what it costs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def render_side_by_side(by_mode: dict[str, dict[str, Any]]) -> str:
    modes = list(by_mode)
    first = next(iter(by_mode.values()))
    t0 = first["config"]["threshold"]
    lines = [
        f"## Embedding modes side by side (shipped threshold {t0} on the reference scale,"
        " guards on)",
        "",
        "Pairs: precision / recall / false-positive rate. Workloads: hit-P / hit-R / wrong-hit"
        " rate. `mpnet asked`: share of pairs (lookups) with a candidate in the two-stage band.",
        "",
        "| set | " + " | ".join(modes) + " | mpnet asked (two-stage) |",
        "|---|" + "---|" * len(modes) + "---|",
    ]
    for kind in ("pairs", "workloads"):
        for name in first[kind]:
            cells = []
            for mode in modes:
                r = by_mode[mode][kind].get(name)
                cells.append(_prf(r["shipped"]) if r else "–")
            two = by_mode.get("two-stage", {}).get(kind, {}).get(name)
            asked = f"{two['rescored_share']:.1%}" if two else "–"
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {asked} |")
    lines += ["", "Recall at the best threshold whose false-positive rate stays at MiniLM's:", ""]
    lines += _at_minilm_fpr(by_mode)
    lines += ["", "Encode cost (one short question, one thread, p50):", ""]
    lines += _latency(by_mode)
    return "\n".join(lines) + "\n"


def _prf(r: dict[str, Any]) -> str:
    return f"{r['precision']:.3f} / {r['recall']:.3f} / {r['fpr']:.2%}"


def _at_minilm_fpr(by_mode: dict[str, dict[str, Any]]) -> list[str]:
    """Each mode's guarded sweep read at the wrong-hit rate MiniLM has at its shipped point:
    the threshold-free comparison (a stronger model may simply want another threshold)."""
    base = by_mode.get("minilm")
    if base is None:
        return ["(needs the minilm mode)"]
    modes = list(by_mode)
    lines = ["| set | MiniLM FPR | " + " | ".join(modes) + " |", "|---|---|" + "---|" * len(modes)]
    for kind in ("pairs", "workloads"):
        for name, reference in base[kind].items():
            fpr = reference["shipped"]["fpr"]
            cells = []
            for mode in modes:
                r = by_mode[mode][kind].get(name)
                ok = [g for g in (r or {}).get("guarded", []) if g["fpr"] <= fpr]
                best = max(ok, key=lambda g: (g["recall"], -g["threshold"])) if ok else None
                cells.append(f"{best['recall']:.3f} @ {best['threshold']:.2f}" if best else "–")
            lines.append(f"| {name} | {fpr:.2%} | " + " | ".join(cells) + " |")
    return lines


def _latency(by_mode: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| mode | encode p50 (ms) | against MiniLM |", "|---|---|---|"]
    encode: dict[str, float] = {}
    for results in by_mode.values():
        encode.update(results.get("latency", {}).get("encode_p50_ms_by_model", {}))
    minilm = encode.get("minilm")
    for mode, results in by_mode.items():
        if mode == "two-stage":
            if "minilm" not in encode or "mpnet" not in encode:
                continue
            shares = [
                w["rescored_share"] for w in results["workloads"].values() if "rescored_share" in w
            ]
            share = max(shares) if shares else 1.0
            ms = encode["minilm"] + share * encode["mpnet"]
            label = f"two-stage (MiniLM + {share:.0%} × mpnet, the busiest workload)"
        elif mode in encode:
            ms, label = encode[mode], mode
        else:
            continue
        ratio = f"{ms / minilm:.2f}×" if minilm else "–"
        lines.append(f"| {label} | {ms:.1f} | {ratio} |")
    return lines


def main(argv: list[str]) -> int:
    """Rebuild the side-by-side table from per-mode results (bench/results/quality-MODE.json),
    e.g. after one mode was measured again."""
    by_mode = {}
    for path in map(Path, argv):
        results = json.loads(path.read_text())
        by_mode[results["mode"]["name"]] = results
    side = render_side_by_side(by_mode)
    print(side)
    Path(argv[0]).with_name("quality-models.md").write_text(side)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
