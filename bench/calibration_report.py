"""Summaries, the table, the plot and the markdown of `bench.calibration`'s results."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.harness import print_table
from core.semantic_config import SemanticConfig

TARGET = 0.01
COMMENTARY = "\n<!-- commentary: written by hand, kept when the bench rewrites this file -->\n"
VERIFIED_FOR_COVERAGE = 1000


def _rate(num: int, den: int) -> float:
    return num / den if den else 0.0


def summarize(windows: list[Any], similarities: list[Any]) -> dict[str, Any]:
    """Totals, the second half (after warm-up), and whether the interval covered the truth."""
    ws = [w if isinstance(w, dict) else asdict(w) for w in windows]
    cum_hits = cum_wrong = 0
    coverage, truth = [], []
    for w in ws:
        cum_hits += w["semantic_hits"]
        cum_wrong += w["semantic_wrong"]
        truth.append(_rate(cum_wrong, cum_hits))
        if w["verified"] >= VERIFIED_FOR_COVERAGE:
            low, high = w["interval_95"]
            coverage.append(low <= truth[-1] <= high)
    late = ws[len(ws) // 2 :]
    late_sem = sum(w["semantic_hits"] for w in late)
    last = ws[-1]
    return {
        "true_cumulative": truth,
        "semantic_hits": cum_hits,
        "semantic_wrong": cum_wrong,
        "true_false_hit_rate": _rate(cum_wrong, cum_hits),
        "lemma_hits": sum(w["lemma_hits"] for w in ws),
        "lemma_wrong": sum(w["lemma_wrong"] for w in ws),
        "errors": sum(w["errors"] for w in ws),
        "verified": last["verified"],
        "estimate": last["estimate"],
        "interval_95": list(last["interval_95"]),
        "covers_truth": last["interval_95"][0]
        <= _rate(cum_wrong, cum_hits)
        <= last["interval_95"][1],
        "coverage_checks": len(coverage),
        "coverage_held": sum(coverage),
        "final_threshold": last["global_threshold"],
        # Learning from misses (absent from runs recorded before it existed).
        "learned_verified": last.get("learned_verified", 0),
        "learned_wrong": last.get("learned_wrong", 0),
        "near_misses_agreed": last.get("near_misses_agreed", 0),
        "late_semantic_hits": late_sem,
        "late_true_false_hit_rate": _rate(sum(w["semantic_wrong"] for w in late), late_sem),
        "late_new_queries": sum(w["new_queries"] for w in late),
        "late_new_hit_rate": _rate(
            sum(w["new_hits"] for w in late), sum(w["new_queries"] for w in late)
        ),
        "new_hit_rate": _rate(sum(w["new_hits"] for w in ws), sum(w["new_queries"] for w in ws)),
        "late_hit_rate": _rate(sum(w["hits"] for w in late), sum(w["queries"] for w in late)),
        "last_window_true_false_hit_rate": _rate(last["semantic_wrong"], last["semantic_hits"]),
        "first_window_true_false_hit_rate": _rate(ws[0]["semantic_wrong"], ws[0]["semantic_hits"]),
        "wrong_similarities": sorted(round(sim, 4) for sim, right in similarities if not right),
        "similarity_histogram": _histogram(similarities),
    }


def _histogram(similarities: list[Any]) -> dict[str, list[int]]:
    """Semantic hits per similarity bin of 0.01: {"0.91": [right, wrong], ...}."""
    bins: dict[str, list[int]] = {}
    for sim, right in similarities:
        counts = bins.setdefault(f"{math.floor(sim * 100) / 100:.2f}", [0, 0])
        counts[0 if right else 1] += 1
    return dict(sorted(bins.items()))


def render_table(result: dict[str, Any]) -> str:
    rows = []
    for run in result["runs"]:
        s = run["summary"]
        low, high = s["interval_95"]
        rows.append(
            [
                run["name"],
                s["semantic_hits"],
                f"{s['true_false_hit_rate']:.2%}",
                f"{s['estimate']:.2%} [{low:.2%}, {high:.2%}]",
                s["verified"],
                "yes" if s["covers_truth"] else "NO",
                f"{s['late_true_false_hit_rate']:.2%}",
                f"{s['late_new_hit_rate']:.1%}",
                f"{s['late_hit_rate']:.1%}",
                f"{s['final_threshold']:.3f}",
                f"{s.get('learned_wrong', 0)}/{s.get('learned_verified', 0)}",
            ]
        )
    headers = [
        "run",
        "sem. hits",
        "true FHR",
        "estimate [95% CI]",
        "verified",
        "covers",
        "true FHR 2nd half",
        "new-prompt hit rate 2nd half",
        "hit rate 2nd half",
        "T end",
        "learned hits wrong/verified",
    ]
    return print_table(
        "Calibration on Banking77 (whole run; 2nd half = after warm-up)", headers, rows
    )


def frontier_verdicts(result: dict[str, Any]) -> list[str]:
    """Each self-calibrating run against the static thresholds of the same hit rule (with or
    without the neighbour-answer check) at its false-hit rate: the most generous static run
    that was at most as wrong. Static runs on one stream are reproducible (their rates repeat
    to ±0.01 points between runs), so "at most as wrong" is read as measured; hit rates on
    new prompts are compared with an allowance for noise (1.96 standard errors of the
    difference). The next static run on the generous side is named too, for the trade."""
    static = [r for r in result["runs"] if r["spec"]["kind"] == "static"]
    out = []
    for run in result["runs"]:
        if run["spec"]["kind"] == "static":
            continue
        s = run["summary"]
        rate, hit = s["late_true_false_hit_rate"], s["late_new_hit_rate"]
        rule = [r for r in static if _margin(r) == _margin(run)]
        if not rule:
            out.append(f"{run['name']}: no static run of the same hit rule was measured")
            continue
        head = f"{run['name']}: {rate:.2%} wrong, new-prompt hit rate {hit:.1%}"
        accurate = [r for r in rule if r["summary"]["late_true_false_hit_rate"] <= rate]
        generous = [r for r in rule if r["summary"]["late_true_false_hit_rate"] > rate]
        if accurate:
            best = max(accurate, key=lambda r: r["summary"]["late_new_hit_rate"])
            verdict = _compare(hit, s, best["summary"])
            text = (
                f"{head}, {verdict} the most generous static run at most as wrong, {_point(best)}"
            )
        else:
            best = min(generous, key=lambda r: r["summary"]["late_true_false_hit_rate"])
            verdict = _compare(hit, s, best["summary"])
            text = (
                f"{head}: more accurate than every static run of its rule, and {verdict} the "
                f"most accurate of them, {_point(best)}"
            )
        rest = [r for r in generous if r is not best]
        if rest:
            nxt = min(rest, key=lambda r: r["summary"]["late_true_false_hit_rate"])
            text += f"; the next static run, {_point(nxt)}, is more wrong"
        elif accurate:
            text += " (no static run of its rule that was more wrong was measured)"
        out.append(text)
    return out


def _point(run: dict[str, Any]) -> str:
    s = run["summary"]
    return (
        f"{run['name']} ({s['late_true_false_hit_rate']:.2%} wrong, "
        f"{s['late_new_hit_rate']:.1%} new-prompt hits)"
    )


def _compare(hit: float, own: dict[str, Any], other: dict[str, Any]) -> str:
    noise = 1.96 * math.sqrt(
        _variance(hit, own["late_new_queries"])
        + _variance(other["late_new_hit_rate"], other["late_new_queries"])
    )
    gap = hit - other["late_new_hit_rate"]
    return "above" if gap > noise else "NOT above" if gap < -noise else "level (within noise) with"


def _margin(run: dict[str, Any]) -> float:
    # Runs recorded before the neighbour-answer check existed ran without it.
    return float(run["spec"].get("answer_margin", 0.0))


def _variance(rate: float, n: int) -> float:
    """Of a proportion measured on n trials."""
    return rate * (1 - rate) / n if n else 0.0


def render_plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(13, 13.5))
    grid = fig.add_gridspec(3, 2)
    fhr, est = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    sem, thr = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
    frontier = fig.add_subplot(grid[2, :])
    palette = plt.get_cmap("tab10").colors
    colours = [palette[i % len(palette)] for i in range(len(result["runs"]))]
    for run, colour in zip(result["runs"], colours, strict=True):
        ws = run["windows"]
        x = [w["end_query"] for w in ws]
        style = "-" if run["spec"]["main"] else ":"
        fhr.plot(
            x,
            [_rate(w["semantic_wrong"], w["semantic_hits"]) for w in ws],
            style,
            color=colour,
            label=run["name"],
        )
        sem.plot(
            x,
            [_rate(w["new_hits"], w["new_queries"]) for w in ws],
            style,
            color=colour,
            label=run["name"],
        )
        thr.plot(x, [w["global_threshold"] for w in ws], style, color=colour, label=run["name"])
        if run["spec"]["main"]:
            est.plot(
                x, [w["estimate"] for w in ws], "-", color=colour, label=f"{run['name']}: estimate"
            )
            est.fill_between(
                x,
                [w["interval_95"][0] for w in ws],
                [w["interval_95"][1] for w in ws],
                color=colour,
                alpha=0.15,
            )
            est.plot(x, run["summary"]["true_cumulative"], "--", color=colour, label="truth")
    for ax in (fhr, est):
        ax.axhline(TARGET, color="red", linewidth=0.8, label="target 1 %")
        ax.set_ylim(0, 0.08)
        ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    fhr.set_title("True false-hit rate per window")
    est.set_title("Running estimate with its 95 % interval, and the truth (dashed)")
    sem.set_title("Hit rate on new prompts per window")
    thr.set_title("Global threshold at the end of each window")
    for ax in (fhr, est, sem, thr):
        ax.set_xlabel("queries")
        ax.grid(alpha=0.3)
    _plot_frontier(frontier, result, colours)
    fhr.legend(fontsize=8)
    est.legend(fontsize=7, ncol=2)
    fig.suptitle(
        f"Banking77, {result['queries']:,} queries ({result['new_share']:.0%} new prompts), "
        f"verification share 5 %, windows of {result['window']:,}"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_frontier(ax: Any, result: dict[str, Any], colours: list[Any]) -> None:
    """Second-half new-prompt hit rate against true false-hit rate: the static thresholds of
    each hit rule joined into their frontier, every run a labelled point."""
    import matplotlib

    static = [r for r in result["runs"] if r["spec"]["kind"] == "static"]
    for margin in sorted({_margin(r) for r in static}):
        line = sorted(
            (r for r in static if _margin(r) == margin),
            key=lambda r: r["summary"]["late_true_false_hit_rate"],
        )
        if len(line) > 1:
            ax.plot(
                [r["summary"]["late_true_false_hit_rate"] for r in line],
                [r["summary"]["late_new_hit_rate"] for r in line],
                "-" if margin else ":",
                color="lightgray",
                zorder=1,
            )
    for run, colour in zip(result["runs"], colours, strict=True):
        s = run["summary"]
        marker = "o" if run["spec"]["kind"] == "static" else "*"
        ax.scatter(
            s["late_true_false_hit_rate"],
            s["late_new_hit_rate"],
            marker=marker,
            s=60 if marker == "o" else 160,
            color=colour,
            zorder=2,
            label=run["name"],
        )
    ax.axvline(TARGET, color="red", linewidth=0.8)
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.set_xlabel("true false-hit rate, 2nd half")
    ax.set_ylabel("new-prompt hit rate, 2nd half")
    ax.set_title("Accuracy against hit rate after warm-up (static thresholds joined: the frontier)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def render_markdown(result: dict[str, Any], table: str, png: str) -> str:
    lines = [
        "# Calibration of semantic hits (generated by `python -m bench.calibration`)",
        "",
        f"Banking77 dev half ({result['prompts']:,} prompts, {result['groups']} intent groups); "
        f"{result['queries']:,} queries, {result['new_share']:.0%} of them new prompts and the "
        f"rest repeats of earlier ones (seed {result['seed']}), "
        f"replayed in the same order through {len(result['runs'])} `deja serve` processes side "
        f"by side; windows of {result['window']:,} queries; {result['elapsed_s']:.0f} s in all.",
        "",
        "```",
        table.strip(),
        "```",
        "",
        f"![calibration]({png})",
        "",
        "## Method",
        "",
        "- Runs: *static* pins the global threshold and every entry floor "
        "(`verify.threshold_min = threshold_max = semantic.threshold`) and does not store the "
        "fresh answers of failed verifications (`verify.store_disagreeing` off), so "
        "verification only counts; *self-calibrating* runs use the shipped `verify` settings, "
        "the loose one starts "
        f"at {result['runs'][2]['spec']['start']:.2f} with `threshold_min` "
        f"{result['runs'][2]['spec']['threshold_min']:.2f}. All verify 5 % of semantic hits. "
        "Every run uses the shipped neighbour-answer check (`semantic.answer_margin` "
        f"{SemanticConfig().answer_margin:.2f}) unless its name says *no answer check*.",
        "- Upstream: answers by intent group, each answer in five wordings (case and spacing, a "
        "greeting, a closing line) picked at random per call. Across all wordings, same-group "
        "answer cosines are ≥ 0.90 and cross-group ones ≤ 0.73 (MiniLM), so with "
        "`verify.answer_agreement` 0.85 a verification's verdict is the truth: the interval "
        "tests sampling, not the judge.",
        "- Truth: a semantic hit is wrong when the answer served belongs to another group than "
        "the query's. Lemma-key hits are counted apart (they are not semantic hits).",
        "- New-prompt hit rate = hits among queries whose prompt is asked for the first time "
        "(11 % of the stream, spread evenly): how often the cache answers something it has not "
        "seen. Repeats make the overall hit rate climb towards 1 in every run.",
        '- Warm-up: the first half of the stream; "2nd half" figures are the rest.',
        "",
        "## Targets",
        "",
    ]
    for run in result["runs"]:
        s = run["summary"]
        if s["coverage_checks"]:
            lines.append(
                f"- Coverage, {run['name']}: the interval covered the cumulative truth at "
                f"{s['coverage_held']} of {s['coverage_checks']} window ends with ≥ 1,000 "
                "verified hits."
            )
    loose = result["runs"][2]
    first = loose["summary"]["first_window_true_false_hit_rate"]
    lines.append(
        f"- Loose start, {loose['name']}: {first:.2%} wrong hits in the first window "
        "(aimed at ~5 %)."
    )
    for run in result["runs"]:
        if run["spec"]["kind"] == "self-calibrating":
            s = run["summary"]
            met = "met" if s["late_true_false_hit_rate"] < TARGET else "NOT met"
            lines.append(
                f"- Under 1 % after warm-up, {run['name']}: {s['late_true_false_hit_rate']:.2%} "
                f"in the second half, {s['last_window_true_false_hit_rate']:.2%} in the last "
                f"window ({met})."
            )
    lines += [f"- Hit rate at equal accuracy, {v}." for v in frontier_verdicts(result)]
    return "\n".join(lines) + "\n"
