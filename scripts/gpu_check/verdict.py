"""check-node's ``--json`` list (stdin) -> one gpu-check line.

    python verdict.py NAME [--excuse CHECK,CHECK --why SENTENCE]

PASS when every check is ok (those named by ``--excuse`` are listed, not counted: e.g. the
compute mode, which gpu-check leaves as it is); FAIL with each failing check, what was
seen and its fix."""

from __future__ import annotations

import argparse
import json
import sys

from common import emit


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("name")
    p.add_argument("--excuse", default="")
    p.add_argument("--why", default="")
    args = p.parse_args()
    text = sys.stdin.read()
    try:
        checks = json.loads(text)
    except ValueError as e:
        emit("FAIL", args.name, f"check-node gave no JSON ({e}): {text[-300:]}")
        return 1
    excused = {c for c in args.excuse.split(",") if c}
    bad = [c for c in checks if not c["ok"] and c["check"] not in excused]
    not_counted = [c["check"] for c in checks if not c["ok"] and c["check"] in excused]
    extra = f"; not counted: {', '.join(not_counted)} ({args.why})" if not_counted else ""
    if bad:
        shown = "; ".join(f"{c['check']}: {c['detail']} (fix: {c['fix']})" for c in bad)
        emit("FAIL", args.name, shown + extra)
        return 1
    ok = [c["check"] for c in checks if c["ok"]]
    emit("PASS", args.name, f"{len(ok)} checks passed ({', '.join(ok)}){extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
