"""``jupyterhub-gpu reserve add|list|delete``: GPU reservations through the hub's API
(:mod:`jupyterhub_gpu.hub.api.reservations`), with an admin's token."""

from __future__ import annotations

import argparse
import json
import os
import sys

import httpx


def main(argv: list[str]) -> int:
    """``jupyterhub-gpu reserve add|list|delete``: the admin API from a shell, with the
    token in ``JUPYTERHUB_API_TOKEN`` (an admin's)."""
    p = argparse.ArgumentParser(prog="jupyterhub-gpu reserve")
    p.add_argument("--hub", default=os.environ.get("JUPYTERHUB_URL", "http://127.0.0.1:8000"))
    sub = p.add_subparsers(dest="action", required=True)
    add = sub.add_parser("add", help="reserve GPUs for a group and a window")
    add.add_argument("--group", required=True)
    add.add_argument("--start", required=True, help="ISO time with zone")
    add.add_argument("--end", required=True, help="ISO time with zone")
    add.add_argument("--model")
    add.add_argument("--count", type=int, default=0)
    add.add_argument("--node", action="append", default=[], dest="nodes")
    add.add_argument("--gpu", action="append", default=[], dest="gpu_uuids")
    add.add_argument("--note", default="")
    sub.add_parser("list", help="the reservations not over yet")
    delete = sub.add_parser("delete", help="delete a reservation")
    delete.add_argument("id")
    args = p.parse_args(argv)
    token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
    if not token:
        print("Set JUPYTERHUB_API_TOKEN to an admin's API token.", file=sys.stderr)
        return 2
    url = f"{args.hub.rstrip('/')}/hub/api/gpu/reservations"
    headers = {"Authorization": f"token {token}"}
    try:
        r = _request(args, url, headers)
    except httpx.HTTPError as e:
        print(f"The hub at {args.hub} did not answer: {e}", file=sys.stderr)
        return 1
    if r.status_code >= 400:
        print(_message(r), file=sys.stderr)
        return 1
    if r.content:
        print(json.dumps(r.json(), indent=2))
    return 0


def _request(args: argparse.Namespace, url: str, headers: dict[str, str]) -> httpx.Response:
    if args.action == "list":
        return httpx.get(url, headers=headers, timeout=30)
    if args.action == "delete":
        return httpx.delete(f"{url}/{args.id}", headers=headers, timeout=30)
    body = {k: getattr(args, k) for k in ("group", "start", "end", "count", "note")}
    body.update(nodes=args.nodes, gpu_uuids=args.gpu_uuids)
    if args.model:
        body["model"] = args.model
    return httpx.post(url, headers=headers, json=body, timeout=30)


def _message(r: httpx.Response) -> str:
    try:
        return str(r.json().get("message") or r.text)
    except ValueError:
        return f"HTTP {r.status_code}: {r.text[:200]}"
