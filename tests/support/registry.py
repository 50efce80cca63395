"""A read-only Docker registry (HTTP API v2, pulls only) for tests, in a thread.

The test cluster has no registry and no network, so the spawner's pull path (a missing
image, its progress on the spawn page, a registry error) could not run for real. This
serves images saved from a test engine (``docker save``), plus one synthesised layer of
random bytes so that a pulling engine always has something new to download, under
``10.250.0.1:<port>/<name>:<tag>`` (the site address, which the nodes' engines reach
and trust as an insecure registry: scripts/cluster.sh starts them so).

Layers are served uncompressed (their digest is their diffID; the engine's decompressor
detects plain tar). :meth:`Registry.add_random_image` serves a small image of random bytes
alone (pulls like any image, runs nothing). ``blobs_flow`` holds every blob after its
first MiB while cleared, so a test can cut a pull off mid-way. TEST ONLY: no auth, no
push, everything in one folder.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_V1 = "application/vnd.docker.container.image.v1+json"
LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"  # served as plain tar
ROUTE = re.compile(r"^/v2/(?P<name>.+)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)$")


@dataclass
class Registry:
    folder: Path
    host: str = "10.250.0.1"  # the site address: the nodes reach it (tests/support/cluster.py)
    port: int = 0
    manifests: dict[tuple[str, str], bytes] = field(default_factory=dict)
    blobs: dict[str, Path] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    #: cleared: every blob stops after its first MiB until it is set again (a pull cut
    #: off mid-way is a test's to make)
    blobs_flow: threading.Event = field(default_factory=threading.Event)
    #: blobs whose puller went away before the whole blob was sent
    cut_off: list[str] = field(default_factory=list)
    #: seconds each MiB of a blob after the first is held: a pull that lasts long enough
    #: for its pace to show however fast the machine is (0: as fast as it can)
    seconds_per_mib: float = 0.0

    def __post_init__(self) -> None:
        self.blobs_flow.set()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def image(self, name: str, tag: str) -> str:
        return f"{self.address}/{name}:{tag}"

    def _blob(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        path = self.folder / digest.replace(":", "_")
        path.write_bytes(data)
        self.blobs[digest] = path
        return digest

    def add_saved_image(self, saved: Path, name: str, tag: str, extra_mib: int = 16) -> None:
        """Serve the image in ``saved`` (a ``docker save`` tar of one image) as
        ``name:tag``, with one more layer of ``extra_mib`` MiB of random bytes on top."""
        unpacked = self.folder / f"unpacked-{saved.stem}"  # one image, several tags
        if not unpacked.exists():
            with tarfile.open(saved) as tar:
                tar.extractall(unpacked, filter="data")
        (entry,) = json.loads((unpacked / "manifest.json").read_text())
        config = json.loads((unpacked / entry["Config"]).read_text())
        layers: list[dict[str, Any]] = []
        for rel, diff_id in zip(entry["Layers"], config["rootfs"]["diff_ids"], strict=True):
            path = unpacked / rel
            self.blobs[diff_id] = path  # served uncompressed: digest = diffID
            layers.append({"mediaType": LAYER, "size": path.stat().st_size, "digest": diff_id})
        extra = _random_layer(extra_mib)
        extra_digest = self._blob(extra)
        layers.append({"mediaType": LAYER, "size": len(extra), "digest": extra_digest})
        config["rootfs"]["diff_ids"].append(extra_digest)
        config.setdefault("history", []).append({"created_by": "tests/support/registry.py"})
        config_bytes = json.dumps(config).encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_V2,
            "config": {
                "mediaType": CONFIG_V1,
                "size": len(config_bytes),
                "digest": self._blob(config_bytes),
            },
            "layers": layers,
        }
        self._manifest(name, tag, manifest)

    def add_random_image(self, name: str, tag: str, mib: int) -> None:
        """Serve ``name:tag``: an image of one layer of ``mib`` MiB of random bytes and
        nothing else (it pulls like any image; it has nothing to run)."""
        layer = _random_layer(mib)
        digest = self._blob(layer)
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [digest]},
            "history": [{"created_by": "tests/support/registry.py"}],
        }
        config_bytes = json.dumps(config).encode()
        self._manifest(name, tag, {
            "schemaVersion": 2,
            "mediaType": MANIFEST_V2,
            "config": {
                "mediaType": CONFIG_V1, "size": len(config_bytes),
                "digest": self._blob(config_bytes),
            },
            "layers": [{"mediaType": LAYER, "size": len(layer), "digest": digest}],
        })  # fmt: skip

    def _manifest(self, name: str, tag: str, manifest: dict[str, Any]) -> None:
        body = json.dumps(manifest).encode()
        self.manifests[(name, tag)] = body
        self.manifests[(name, "sha256:" + hashlib.sha256(body).hexdigest())] = body


def _random_layer(mib: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = os.urandom(mib * 2**20)
        info = tarfile.TarInfo("opt/pull-test.bin")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _handler(registry: Registry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            registry.requests.append(getattr(self, "requestline", "") or format % args)

        def _send(self, status: int, body: bytes, ctype: str, **headers: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            for key, value in headers.items():
                self.send_header(key.replace("_", "-"), value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _unknown(self, code: str) -> None:
            body = json.dumps({"errors": [{"code": code, "message": code.lower()}]})
            self._send(404, body.encode(), "application/json")

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v2":
                self._send(200, b"{}", "application/json")
                return
            match = ROUTE.match(self.path)
            if match is None:
                self._unknown("NAME_UNKNOWN")
                return
            name, kind, ref = match["name"], match["kind"], match["ref"]
            if kind == "manifests":
                body = registry.manifests.get((name, ref))
                if body is None:
                    self._unknown("MANIFEST_UNKNOWN")
                    return
                digest = "sha256:" + hashlib.sha256(body).hexdigest()
                self._send(200, body, MANIFEST_V2, Docker_Content_Digest=digest)
                return
            path = registry.blobs.get(ref)
            if path is None:
                self._unknown("BLOB_UNKNOWN")
                return
            size = path.stat().st_size
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.send_header("Docker-Content-Digest", ref)
            self.end_headers()
            if self.command == "HEAD":
                return
            try:
                with path.open("rb") as f:
                    chunk = f.read(1 << 20)
                    while chunk:
                        self.wfile.write(chunk)
                        if chunk := f.read(1 << 20):  # more to come: held while cleared
                            registry.blobs_flow.wait(60)  # bounded: never a thread for good
                            if registry.seconds_per_mib:
                                time.sleep(registry.seconds_per_mib)
            except (BrokenPipeError, ConnectionResetError):
                registry.cut_off.append(ref)
                self.close_connection = True

        do_HEAD = do_GET

    return Handler


@contextmanager
def serve(registry: Registry) -> Iterator[Registry]:
    """Run ``registry`` on a free port of its host until the block ends."""
    server = ThreadingHTTPServer((registry.host, registry.port), _handler(registry))
    server.daemon_threads = True
    registry.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="test-registry", daemon=True)
    thread.start()
    try:
        yield registry
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serving_images(
    engine_client: Any, image: str, folder: Path, name: str, tags: dict[str, int]
) -> Iterator[Registry]:
    """A registry in ``folder`` serving ``image`` (saved from ``engine_client``, a
    docker-py client) as ``name:tag`` for each tag, with that many MiB of random bytes
    added as a layer of its own (``tags``: ``{tag: extra_mib}``), until the block ends."""
    saved = folder / "saved.tar"
    with saved.open("wb") as f:
        for chunk in engine_client.images.get(image).save(named=True):
            f.write(chunk)
    reg = Registry(folder)
    for tag, extra_mib in tags.items():
        reg.add_saved_image(saved, name, tag, extra_mib=extra_mib)
    saved.unlink()
    with serve(reg):
        yield reg
