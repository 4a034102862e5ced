"""The tables of `bench.quality` (Markdown) and the issue's targets, from its results dict."""

from __future__ import annotations

from typing import Any

SHOWN_THRESHOLDS = (0.80, 0.84, 0.86, 0.88, 0.90, 0.92, 0.95)


def targets(results: dict[str, Any]) -> dict[str, Any]:
    """QQP: FPR ≤ 1 % with ≥ 2× the bare recall at 1 %; PAWS: P ≥ 0.9 at R ≥ 0.45 (issue 20;
    issue 4 asked R ≥ 0.3); everyday-en: no trap hit and ≥ 80 % of the paraphrases hit."""
    out: dict[str, Any] = {}
    qqp = results["pairs"].get("qqp")
    if qqp:
        # The shipped threshold's FPR is above 1 %, so the point is read at the guarded rule's
        # own threshold for FPR ≤ 1 % (the same guards, a higher cosine).
        guarded, bare = qqp["at_max_fpr"]["guarded"], qqp["at_max_fpr"]["bare"]
        ratio = guarded["recall"] / bare["recall"] if bare["recall"] else 0.0
        out["qqp"] = {
            "guarded_recall_at_1pct_fpr": guarded["recall"],
            "bare_recall_at_1pct_fpr": bare["recall"],
            "ratio": ratio,
            "met": ratio >= 2.0,
        }
    paws = results["pairs"].get("paws-wiki")
    if paws:
        shipped = paws["shipped"]
        out["paws-wiki"] = {
            "shipped_precision": shipped["precision"],
            "shipped_recall": shipped["recall"],
            "met": shipped["precision"] >= 0.9 and shipped["recall"] >= 0.45,
        }
    everyday = results["pairs"].get("everyday-en")
    if everyday:
        shipped = everyday["shipped"]
        out["everyday-en"] = {
            "paraphrase_recall": shipped["recall"],
            "trap_hits": shipped["wrong"],
            "met": shipped["wrong"] == 0 and shipped["recall"] >= 0.8,
        }
    return out


def _prf(r: dict[str, Any]) -> str:
    if not r:
        return "– | – | –"
    return f"{r['precision']:.3f} | {r['recall']:.3f} | {r['fpr']:.2%}"


def _cos_of_gptcache(t: float) -> str:
    return f"{2 * t - 1:.3f}"


def render_markdown(results: dict[str, Any]) -> str:
    cfg = results["config"]
    t0 = cfg["threshold"]
    lines = [
        f"Shipped default: threshold {t0}, guards "
        + ", ".join(k[6:] for k, v in cfg.items() if k.startswith("guard_") and v)
        + f", spaCy NER {'on' if cfg['spacy_ner'] else 'off'}.",
        "",
        "### Pairs: precision | recall | false-positive rate (wrong hits / non-duplicates)",
        "",
        "| set | rule | threshold | P | R | FPR |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results["pairs"].items():
        rows = [
            ("**Deja, shipped default (guards on)**", t0, r["shipped"]),
            ("same threshold, no guards", t0, r["shipped_no_guards"]),
            ("bare cosine, best recall at the shipped FPR", None, r["at_shipped_fpr"]["bare"]),
            ("GPTCache, default 0.8", 0.8, _gpt_at(r, 0.8)),
            ("GPTCache, best recall at the shipped FPR", None, r["at_shipped_fpr"]["gptcache"]),
            ("bare cosine, best recall at FPR ≤ 1 %", None, r["at_max_fpr"]["bare"]),
            ("Deja guards, best recall at FPR ≤ 1 %", None, r["at_max_fpr"]["guarded"]),
        ]
        for label, t, rates in rows:
            shown = f"{t}" if t is not None else _threshold_of(rates, label)
            lines.append(f"| {name} ({r['pairs']}) | {label} | {shown} | {_prf(rates)} |")
    if results["workloads"]:
        lines += [
            "",
            "### Workload replay: hit-P | hit-R | wrong hits / lookups",
            "",
            "| set | rule | threshold | hit-P | hit-R | wrong-hit rate |",
            "|---|---|---|---|---|---|",
        ]
        for name, r in results["workloads"].items():
            at = r["at_shipped_fpr"]
            rows = [
                ("**Deja, shipped default (guards on)**", t0, r["shipped"]),
                ("same threshold, no answer check", t0, r["shipped_no_answer_check"]),
                ("same threshold, no guards", t0, r["shipped_no_guards"]),
                ("bare cosine, best recall at the shipped rate", None, at["bare"]),
                ("GPTCache, default 0.8", 0.8, _gpt_at(r, 0.8)),
                ("GPTCache, best recall at the shipped rate", None, at["gptcache"]),
            ]
            for label, t, rates in rows:
                shown = f"{t}" if t is not None else _threshold_of(rates, label)
                lines.append(f"| {name} ({r['prompts']}) | {label} | {shown} | {_prf(rates)} |")
    lines += _label_ceilings(results)
    lines += _by_kind(results)
    lines += _sweeps(results)
    lines += _ablations(results, t0)
    if "targets" in results:
        lines += ["", "### Targets", ""]
        for name, t in results["targets"].items():
            verdict = "met" if t["met"] else "NOT met"
            detail = ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                for k, v in t.items()
                if not isinstance(v, bool)
            )
            lines.append(f"- {name}: **{verdict}** ({detail})")
    if "latency" in results:
        lat = results["latency"]
        lines += [
            "",
            f"### Latency on this machine ({lat['samples']} Banking77 prompts, one at a time)",
            "",
            f"analysis p50 {lat['analyze_p50_ms']:.2f} ms (p95 {lat['analyze_p95_ms']:.2f} ms); "
            f"bare single encode p50 {lat['encode_p50_ms']:.2f} ms; "
            f"one guard comparison p50 {lat['guard_p50_us']:.1f} µs.",
        ]
    return "\n".join(lines) + "\n"


def _by_kind(results: dict[str, Any]) -> list[str]:
    """Own sets: hits of the shipped rule per kind of pair, and the pairs it got wrong."""
    lines: list[str] = []
    for name, r in results["pairs"].items():
        kinds = r.get("by_kind") or {}
        if not kinds:
            continue
        lines += ["", f"### {name}: hits of the shipped rule per kind", ""]
        lines += ["| kind | pairs | hits |", "|---|---|---|"]
        lines += [f"| {k} | {v['pairs']} | {v['hits']} |" for k, v in sorted(kinds.items())]
        wrong = [(k, a, b) for k, v in sorted(kinds.items()) for a, b in v["wrong"]]
        if wrong:
            lines += ["", "Wrong (a paraphrase missed, or a trap hit):", ""]
            lines += [f"- {k}: {a!r} / {b!r}" for k, a, b in wrong]
    return lines


def _label_ceilings(results: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "### What the labels allow at FPR ≤ 1 %",
        "",
        "| set | labelled duplicate: identical texts | cosine ≥ 0.99 "
        "| recall if the guards never blocked a duplicate "
        "| needed for 2× bare: recall at precision |",
        "|---|---|---|---|---|",
    ]
    for name, r in results["pairs"].items():
        c = r.get("label_ceiling")
        if not c:
            continue
        same, near, ceiling = c["identical"], c["near_identical"], c["never_block_duplicates"]
        lines.append(
            f"| {name} | {same['share']:.3f} ({same['duplicates']}/{same['pairs']}) "
            f"| {near['share']:.3f} ({near['duplicates']}/{near['pairs']}) "
            f"| {ceiling['recall']:.3f} (P {ceiling['precision']:.3f}) "
            f"| {c['needed_recall']:.3f} at P ≥ {c['needed_precision']:.3f} |"
        )
    return lines


def _gpt_at(r: dict[str, Any], t: float) -> dict[str, Any]:
    return next(g for g in r["gptcache"] if g["similarity_threshold"] == t)


def _threshold_of(rates: dict[str, Any], label: str) -> str:
    if not rates:
        return "–"
    if "GPTCache" in label:
        return f"rank ≥ {rates['threshold']:.3f}"
    return f"{rates['threshold']:.3f}"


def _sweeps(results: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "### Threshold sweep: P | R | FPR without and with the guards",
        "",
        "| set | threshold | no guards P | R | FPR | guards P | R | FPR |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind in ("pairs", "workloads"):
        for name, r in results[kind].items():
            for bare, guarded in zip(r["bare"], r["guarded"], strict=True):
                if bare["threshold"] in SHOWN_THRESHOLDS:
                    lines.append(
                        f"| {name} | {bare['threshold']:.2f} | {_prf(bare)} | {_prf(guarded)} |"
                    )
    lines += [
        "",
        "### GPTCache sweep (SearchDistanceEvaluation; its threshold t is cosine ≥ 2t − 1)",
        "",
        "| set | similarity_threshold | = cosine | P | R | FPR |",
        "|---|---|---|---|---|---|",
    ]
    for kind in ("pairs", "workloads"):
        for name, r in results[kind].items():
            for g in r["gptcache"]:
                t = g["similarity_threshold"]
                lines.append(f"| {name} | {t} | {_cos_of_gptcache(t)} | {_prf(g)} |")
    return lines


def _ablations(results: dict[str, Any], t0: float) -> list[str]:
    sets = {**results["pairs"], **results["workloads"]}
    if not sets:
        return []
    names = list(sets)
    lines = [
        "",
        f"### Each guard off alone, at threshold {t0}: R / FPR",
        "",
        "| variant | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    variants = ["shipped", *next(iter(sets.values()))["ablations"]]
    for v in variants:
        cells = []
        for n in names:
            rates = sets[n]["shipped"] if v == "shipped" else sets[n]["ablations"][v]
            cells.append(f"{rates['recall']:.3f} / {rates['fpr']:.2%}")
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return lines
