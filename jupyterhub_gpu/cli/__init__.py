"""The ``jupyterhub-gpu`` command: admin tools beside the hub.

Imports: ``core``, ``wire``, ``edges``, ``errors`` and ``cli``; never the hub or a service
(a command talks to a running hub over its API).

    jupyterhub-gpu report ...   GPU usage from the accounting database (docs/accounting.md)
    jupyterhub-gpu reserve ...  GPU reservations through the hub (docs/scheduling.md)
"""

from __future__ import annotations

import sys

COMMANDS = {
    "report": "GPU-hours allocated and used, from the accounting database",
    "reserve": "reserve GPUs for a group and a window (add, list, delete)",
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        known = "\n".join(f"  {name:8s} {what}" for name, what in COMMANDS.items())
        print(f"usage: jupyterhub-gpu COMMAND [options]\n\ncommands:\n{known}", file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    if args[0] == "reserve":
        from jupyterhub_gpu.cli import reserve

        return reserve.main(args[1:])
    from jupyterhub_gpu.cli import report

    return report.main(args[1:])


if __name__ == "__main__":
    sys.exit(main())
