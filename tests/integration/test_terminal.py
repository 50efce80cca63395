"""A student's first hour in JupyterLab's terminal (issue 36): a real hub spawns alice's
server on a node, as her directory uid:gid (10001:5000, which no image has in its
/etc/passwd), and the test types into a real terminal of her server, through the hub's
proxy, what the README tells her to: ``pip install --user`` from the site's wheels.

The terminal is a login shell (jupyter_server starts ``$SHELL -l`` when it has no tty),
so /etc/profile has reset PATH: the image must give it back its Python
(/etc/profile.d, images/common/install-python-env.sh), and the start script must give
her uid a name without making /etc/passwd writable (libnss_wrapper,
images/common/start-singleuser.sh). Both the test image and the catalog's CPU image
(built by images/build.py) are checked.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import httpx
import pytest
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from tests.conftest import gpu_inventory
from tests.support.cluster import Engine
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.integration

UID, GID = 10001, 5000
WHEEL = "first-hour"  # a package the site's wheel folder has, and the image does not
# What alice types. The closing marker is computed by the shell, so the terminal's echo
# of the line never matches it.
TYPED = (
    "command -v pip; python -c 'import sys; print(\"prefix=\" + sys.prefix)'; whoami; id -un; "
    "echo home=$HOME; if test -w /etc/passwd; then echo passwd=writable; "
    "else echo passwd=read-only; fi; stat -c passwd-owner=%u:%a /etc/passwd; "
    "python -c 'import json, sys; s = json.load(open(sys.prefix + "
    "\"/share/jupyter/lab/settings/overrides.json\")); "
    "print(\"news=\" + s[\"@jupyterlab/apputils-extension:notification\"][\"fetchNews\"])'; "
    "ls -1 $VENV/share/jupyter/labextensions; "
    f"pip install --user --no-index --find-links /srv/wheels {WHEEL} && "
    "python -c 'import first_hour; print(\"imported=\" + first_hour.__file__)'; "
    "echo done-$((6 * 7))"
)
DONE = "done-42"
ANSI = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|\][^\x07]*\x07|[()][0-9A-Za-z])")


def terminal_session(hub: Hub, user: str, token: str, typed: str, timeout: float) -> str:
    """Opens a terminal in ``user``'s server (``POST /api/terminals``), types ``typed`` and
    Enter on its websocket, and returns what it printed (escape sequences removed) until
    :data:`DONE` or ``timeout``; the terminal is deleted afterwards."""
    base = f"{hub.url}/user/{user}"
    headers = {"Authorization": f"token {token}"}
    r = httpx.post(f"{base}/api/terminals", headers=headers, timeout=30)
    assert r.status_code == 200, (r.status_code, r.text[:500])
    name = r.json()["name"]
    ws_base = base.replace("http://", "ws://", 1)
    try:
        return asyncio.run(_type(ws_base, name, headers, typed, timeout))
    finally:
        httpx.delete(f"{base}/api/terminals/{name}", headers=headers, timeout=30)


async def _type(base: str, name: str, headers: dict[str, str], typed: str, timeout: float) -> str:
    request = HTTPRequest(f"{base}/terminals/websocket/{name}", headers=headers)
    ws = await websocket_connect(request)
    out = ""
    deadline = time.monotonic() + timeout
    try:
        await ws.write_message(json.dumps(["stdin", typed + "\r"]))
        while DONE not in out and time.monotonic() < deadline:
            try:
                message = await asyncio.wait_for(ws.read_message(), deadline - time.monotonic())
            except asyncio.TimeoutError:
                break
            if message is None:  # the server closed the terminal
                break
            kind, *rest = json.loads(message)
            if kind == "stdout":
                out += ANSI.sub("", rest[0])
    finally:
        ws.close()
    return out.replace("\r", "")


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    make_wheel(folder, WHEEL, "1.0")
    return folder


@pytest.mark.parametrize("slug", ["demo-cpu", "python-cpu"])  # the test image, the catalog's
def test_terminal_login_shell_has_the_python_and_the_users_name(
    make_hub, engine: Engine, wheels: Path, tmp_path: Path, slug: str
) -> None:
    mounts = {"students": [{"source": str(wheels), "target": "/srv/wheels"}]}
    extra = f"""
c.GPUDockerSpawner.default_uid = {UID}
c.GPUDockerSpawner.default_gid = {GID}
c.JupyterHub.load_groups = {{"students": {{"users": ["alice"]}}}}
c.GPUDockerSpawner.group_mounts = {mounts!r}
{TOKEN_ROLE_CONFIG}
"""
    rtx = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
    hub = make_hub([engine], [gpu_inventory(engine.name, "cccccccc", [rtx])], extra)
    hub.create_user("alice")
    r = hub.spawn("alice", {"image": slug, "gpu_count": 0})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("alice")

    out = terminal_session(hub, "alice", hub.user_token("alice"), TYPED, timeout=120)
    lines = [line.strip() for line in out.splitlines()]
    assert DONE in lines, f"the terminal did not finish the commands:\n{out}"
    # the login shell finds the image's environment first, not a system Python
    assert "/opt/venv/bin/pip" in lines, out
    assert "prefix=/opt/venv" in lines, out
    # her uid has her name: whoami, id -un and the prompt
    assert lines.count("alice") >= 2, out
    assert "I have no name!" not in out and "cannot find name" not in out, out
    assert re.search(r"^alice@\S+:", out, re.M), f"no alice@host prompt:\n{out}"
    assert "home=/home/alice" in lines, out
    # ... without a writable /etc/passwd (she would write a uid-0 entry)
    assert "passwd=read-only" in lines and "passwd-owner=0:644" in lines, out
    # JupyterLab asks no "Jupyter news?" question (the hub's warnings use that corner)
    assert "news=false" in lines, out
    if slug == "python-cpu":  # the catalog's images carry the JupyterLab extension
        assert "jupyterhub-gpu-lab" in lines, out
    # the README's "My images" step, as written
    assert f"Successfully installed {WHEEL}-1.0" in out, out
    assert "imported=/home/alice/.local/lib/" in out, out
    home = tmp_path / "homes" / "alice" / ".local"
    assert any(home.glob("lib/python3*/site-packages/first_hour.py")), out
