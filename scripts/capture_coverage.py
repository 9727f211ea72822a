#!/usr/bin/env python3
"""Write docs/pytorch.md, the table of ATen ops goblin.capture maps, from the capture's
op table (pygoblin/goblin/_capture_table.py).

    python3 scripts/capture_coverage.py            # rewrite docs/pytorch.md
    python3 scripts/capture_coverage.py --check    # exit 1 if the committed file differs

The table module is plain data, loaded by path: neither the extension nor torch is needed.
tests/python/test_capture_coverage.py runs --check.
"""
import argparse
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "pygoblin", "goblin", "_capture_table.py")
DOC = os.path.join(ROOT, "docs", "pytorch.md")

INTRO = """\
# PyTorch models on goblin: what capture supports

<!-- Written by scripts/capture_coverage.py from pygoblin/goblin/_capture_table.py:
     edit those, then run the script (tests/python/test_capture_coverage.py checks it). -->

`goblin.capture(model, *examples)` (inference) and `goblin.capture_training(model,
loss_fn, *batch)` (training, used by `grid.train`) export the program with
`torch.export.export`, lower it with `run_decompositions` (PyTorch's default table,
minus the ops below that the catalogue runs whole), and map every remaining ATen op
onto catalogue ops (docs/ops.md). Weights become constants (inference) or stay graph
inputs (training); torch's type promotion becomes explicit casts. A program using an
op that is not in this table raises one `goblin.UnsupportedOpError` naming every such
op at once (`e.ops`), with advice where one applies (`e.hints`).

The names are ATen packets (any overload: `var` covers `aten.var.correction`); many
functions people write arrive as several of them after decomposition, e.g.
`F.cross_entropy(reduction="none")` as `log_softmax`, `gather`, `where`, `neg`, and
`x.std()` as `var` then `sqrt`. Columns: **capture** is `goblin.capture`,
**training** `goblin.capture_training`.
"""

REFUSED = """\
## Refused with advice

These have no mapping; the error says what was written and what to do:

- `F.conv_transpose3d` / `nn.ConvTranspose3d`: named as such, with the convolutions that
  are supported (conv1d, conv2d, conv3d, conv_transpose1d and conv_transpose2d) and the
  advice to upsample a volume with F.interpolate(mode='nearest') then F.conv3d.
- Advanced indexing with a boolean mask or several index tensors: index one dim at a
  time with integer indices.

These ATen ops are refused with this advice (the batch-norm and dropout ones appear in
`goblin.capture` only when a module runs in training mode; `goblin.capture_training` maps
training-mode dropout to goblin's dropout op and batch-norm to batch statistics):
"""


def load_table():
    spec = importlib.util.spec_from_file_location("_capture_table", TABLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cell(text):
    return text.replace("|", "\\|") if text else "-"


def render(t):
    out = [INTRO, "## Op table", "",
           "| ATen op | capture | training | becomes (catalogue ops) | limits |",
           "|---|---|---|---|---|"]
    yes = {"both": ("yes", "yes"), "inference": ("yes", "no"), "training": ("no", "yes")}
    n_names = 0
    for names, how, limits, mode in t.ROWS:
        names = names.split()
        n_names += len(names)
        cap, train = yes[mode]
        out.append(f"| {', '.join('`' + n + '`' for n in names)} | {cap} | {train} | {_cell(how)} | "
                   f"{_cell(limits)} |")
    out += ["", f"{n_names} ATen op names in {len(t.ROWS)} rows.", "",
            "## Kept whole by the decomposition", "",
            "These reach the mapping as one op instead of torch's decomposition, because the "
            "catalogue has a kernel for them:", "",
            ", ".join(f"`{k}`" for k in t.KEEP) + "; training capture also keeps " +
            ", ".join(f"`{k}`" for k in t.TRAIN_KEEP) + ".", "", t.RECURRENCE,
            *([t.TRAINING_MODE] if hasattr(t, "TRAINING_MODE") else []), REFUSED]
    for name, hint in sorted(t.NAME_HINTS.items()):
        out.append(f"- `{name}`: {hint}.")
    out.append("")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with docs/pytorch.md instead of writing it")
    ap.add_argument("--output", default=DOC, help="where to write (default docs/pytorch.md)")
    args = ap.parse_args(argv)
    text = render(load_table())
    if args.check:
        try:
            with open(args.output, encoding="utf-8") as f:
                have = f.read()
        except FileNotFoundError:
            have = None
        if have != text:
            print(f"{args.output} is out of date: run python3 scripts/capture_coverage.py", file=sys.stderr)
            return 1
        return 0
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
