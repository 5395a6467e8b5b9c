"""The goals read off gpu_check's figures, and its section of docs/PERFORMANCE.md (between the
``gpu_check`` markers, so a rerun replaces it and nothing else)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.gpu_steps import LETTER, NAMES
from benchmarks.gpu_steps.common import Plan, split_sizes
from benchmarks.gpu_steps.speed import label

BEGIN = "<!-- gpu_check: begin (written by benchmarks/gpu_check.py; rerun it rather than editing) -->"
END = "<!-- gpu_check: end -->"

#: The goals of issue 28, read off the figures.
EPOCH_RATIO_GOAL = 1.5  # a ResNet-9 epoch of initmem (with its evaluation) / the bare loop's epoch
CONCURRENCY_GOAL = 2.5  # total images/s of 4 concurrent ResNet-20 cells / one cell's


def goals(results: dict[str, Any], dry: bool) -> list[dict[str, Any]]:
    rows = [r for r in results["steps"].get("speed", {}).get("rows", []) if r.get("status") == "measured"]
    nine = [r for r in rows if r["arch"] == "resnet9"]
    read: list[dict[str, Any]] = []
    if nine:
        worst = max(nine, key=lambda r: r["epoch_ratio"])
        read.append(
            {
                "goal": f"a ResNet-9 epoch within {EPOCH_RATIO_GOAL}x of the bare loop at the same precision",
                "figure": f"{worst['epoch_ratio']:.2f}x at worst ({label(worst)}), over {len(nine)} configurations",
                "met": all(r["epoch_ratio"] <= EPOCH_RATIO_GOAL for r in nine),
            }
        )
    else:
        read.append(
            {
                "goal": f"a ResNet-9 epoch within {EPOCH_RATIO_GOAL}x of the bare loop",
                "figure": "not measured",
                "met": None,
            }
        )
    cells = results["steps"].get("concurrency", {}).get("cells", {})
    four = cells.get("4", {}).get("speedup")
    read.append(
        {
            "goal": f"4 concurrent ResNet-20 cells at >= {CONCURRENCY_GOAL}x one cell's images/s",
            "figure": f"{four:.2f}x" if four else "not measured",
            "met": (four >= CONCURRENCY_GOAL) if four else None,
        }
    )
    lockstep = results["steps"].get("lockstep", {}).get("precisions", [])
    rows = [r for r in (lockstep[0]["rows"] if lockstep else []) if "fused_vs_processes" in r]
    widest = max(rows, key=lambda r: r["models"]) if rows else None
    read.append(
        {
            "goal": "lockstep (a figure that decides, no goal): K fused ResNet-20s against K processes",
            "figure": (
                f"{widest['fused_vs_processes']:.2f}x at K = {widest['models']} ({lockstep[0]['precision']})"
                if widest
                else "not measured"
            ),
            "met": None,
        }
    )
    product = results["steps"].get("lockstep", {}).get("product", {})
    read.append(
        {
            "goal": "lockstep's product path (a figure that decides, no goal): a fused sweep job's cells per hour "
            "against K processes'",
            "figure": (
                f"{product['fused_vs_processes']:.2f}x at K = {product['models']}"
                if "fused_vs_processes" in product
                else "not measured"
            ),
            "met": None,
        }
    )
    if dry:
        for item in read:
            item["met"] = None  # toy sizes on a CPU say nothing about a GPU
    return read


def _yes(met: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "-"}[met]


def section(results: dict[str, Any]) -> str:
    m = results["machine"]
    dry = results["dry_run"]
    lines = []
    if dry:
        lines.append(
            f"Dry run (`--dry-run`) on the CPU at toy size: the figures below mean nothing; they show "
            f"that every step runs. {m['cpu']}, {m['cores']} cores, torch {m['torch']}, "
            f"{results['date']}, {results['seconds']:.0f} s."
        )
    else:
        lines.append(
            f"Measured by `python -m benchmarks.gpu_check` on **{m.get('gpu')}** (CUDA {m.get('cuda')}, "
            f"cuDNN {m.get('cudnn')}; host {m['cpu']}, {m['cores']} cores), torch {m['torch']}, "
            f"{results['date']}, commit {results['code'].get('commit') or 'unknown (no git: digests in the JSON)'}; "
            f"the whole check took "
            f"{results['seconds']:.0f} s."
        )
    lines += ["", "| step | what was checked | result |", "| --- | --- | --- |"]
    for step in NAMES:
        r = results["steps"].get(step)
        if r is None:
            continue
        verdict = "passed" if r["passed"] else "**failed**: " + "; ".join(r.get("problems", []))[:400]
        lines.append(f"| ({LETTER[step]}) {step} | {r['detail']} | {verdict} |")
    speed = results["steps"].get("speed", {}).get("rows", [])
    if speed:
        sizes = split_sizes(Plan.from_json(results["plan"]))
        lines += [
            "",
            f"Speed (e): training ms per step (median of the timed epochs, device synchronised); evaluation "
            f"seconds of a whole epoch's evaluation ({sizes['train']:,} clean training images, {sizes['val']:,} "
            f"validation, {sizes['test']:,} test: scaled from the images evaluated, a training subset); and "
            f"a whole epoch ({sizes['train']:,} training images plus that evaluation) against the bare loop's "
            f"training epoch at the same precision, layout and compilation (no evaluation). Both sides: batch "
            f"{results['plan']['speed_batch']}, SGD, the data on the device; initmem augments (crop and flip, "
            f"as the paper's CIFAR cells do), the bare loop does not. `first epoch +s`: what the warm-up "
            f"epoch cost beyond a timed one (compilation, cuDNN's algorithm search).",
            "",
            "| model | precision | channels-last | compile | ms/step | bare ms/step | step ratio | eval s/epoch "
            "| epoch s | bare epoch s | epoch ratio | first epoch +s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in speed:
            head = (
                f"| {r['arch']} | {r['precision']} | {'yes' if r['channels_last'] else 'no'} | "
                f"{r['compile_mode'] or 'no'} |"
            )
            if r["status"] == "measured":
                lines.append(
                    f"{head} {r['step_ms']:.2f} | {r['bare_step_ms']:.2f} | {r['step_ratio']:.2f}x | "
                    f"{r['eval_s_per_epoch']:.2f} | {r['epoch_s']:.2f} | {r['bare_epoch_s']:.2f} | "
                    f"{r['epoch_ratio']:.2f}x | {r['first_epoch_extra_s']:.1f} |"
                )
            else:
                lines.append(f"{head} {r['status']} | | | | | | | |")
    cells = results["steps"].get("concurrency", {}).get("cells", {})
    if cells:
        lines += [
            "",
            "Concurrency (f): ResNet-20 cells as separate processes on one device, tracking off, "
            "evaluation every epoch, timed over one common window; images/s counts training images.",
            "",
            "| cells | total images/s | vs one cell | per cell images/s | CPU threads per cell |",
            "| --- | --- | --- | --- | --- |",
        ]
        for k, r in cells.items():
            if r["status"] == "measured":
                lines.append(
                    f"| {k} | {r['images_per_s']:,.0f} | {r.get('speedup', float('nan')):.2f}x | "
                    f"{', '.join(f'{v:,.0f}' for v in r['per_cell'])} | {r['threads_per_cell']} |"
                )
            else:
                lines.append(f"| {k} | {r['status']} | | | |")
    lines += lockstep_lines(results["steps"].get("lockstep", {}))
    lines += ["", "Read off the figures (the goals of issue 28, and the lockstep figure):", ""]
    for g in results["goals"]:
        lines.append(f"- {g['goal']}: {g['figure']}; met: {_yes(g['met'])}")
    return "\n".join(lines)


def write_section(path: Path, text: str) -> None:
    """Replace what lies between the markers (or add a GPU section with them), leaving the rest."""
    page = path.read_text(encoding="utf-8") if path.exists() else "# Performance\n"
    block = f"{BEGIN}\n{text.strip()}\n{END}"
    if BEGIN in page and END in page:
        start, stop = page.index(BEGIN), page.index(END) + len(END)
        page = page[:start] + block + page[stop:]
    else:
        page = page.rstrip("\n") + "\n\n## GPU\n\n" + block + "\n"
    path.write_text(page, encoding="utf-8")


def lockstep_lines(step: dict[str, Any]) -> list[str]:
    precisions = [p for p in step.get("precisions", []) if p.get("rows")]
    if not precisions:
        return product_lines(step.get("product", {}))
    lines = [
        "",
        "Lockstep (g): K ResNet-20s fused into one model (grouped convolutions, per-model BatchNorm, each "
        "its own sigma) against K processes training one each, on one device; training images/s count "
        "every model's images (K x batch per step); bare loops, synthetic batches on the device, no "
        "evaluation. K = 1 is one plain model in one process.",
        "",
        "| precision | channels-last | K | fused images/s | K processes images/s | fused / processes "
        "| fused / one model |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]

    def figure(value: float | None, status: str) -> str:
        return f"{value:,.0f}" if value else status

    for p in precisions:
        for r in p["rows"]:
            ratio = f"{r['fused_vs_processes']:.2f}x" if "fused_vs_processes" in r else "-"
            one = f"{r['fused_vs_one_model']:.2f}x" if "fused_vs_one_model" in r else "-"
            lines.append(
                f"| {p['precision']} | {'yes' if p['channels_last'] else 'no'} | {r['models']} | "
                f"{figure(r['fused_images_per_s'], r['fused_status'])} | "
                f"{figure(r['processes_images_per_s'], r['processes_status'])} | {ratio} | {one} |"
            )
    return lines + product_lines(step.get("product", {}))


def product_lines(product: dict[str, Any]) -> list[str]:
    """(g)'s product path: a fused sweep job (``lockstep_job``) against one cell and K processes."""
    sides = [side for side in ("one cell", "fused", "processes") if side in product]
    if not sides:
        return []
    knobs = product["knobs"]
    lines = [
        "",
        f"Lockstep's product path (g): whole ResNet-20 cells ({knobs['train_size']:,} training images, "
        f"{knobs['epochs']} epoch(s) at batch {knobs['batch_size']}, evaluation every epoch, tracking off), "
        f"K = {product['models']} of one sigma group as one fused job in one process "
        "(what `initmem sweep --lockstep` runs), one cell alone, and K processes of one cell each started "
        "together; wall time from the built process to the last cell's end.",
        "",
        "| how | cells | seconds | cells per hour |",
        "| --- | --- | --- | --- |",
    ]
    names = {"one cell": "one cell", "fused": "one fused job", "processes": "K processes"}
    for side in sides:
        row = product[side]
        lines.append(f"| {names[side]} | {row['cells']} | {row['seconds']:.1f} | {row['cells_per_hour']:,.0f} |")
    ratios = [
        f"{product[key]:.2f}x {what}"
        for key, what in (("fused_vs_processes", "K processes"), ("fused_vs_one_cell", "one cell"))
        if key in product
    ]
    if ratios:
        lines += ["", f"The fused job's cells per hour: {', '.join(ratios)}."]
    return lines
