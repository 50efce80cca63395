"""The dashboard service's calls to the hub API, with the service's own token, except the
job calls, made with the viewer's own (their OAuth token for this service, which carries
the job scope ``custom:gpu-jobs``): the hub then shows, reads and cancels only what the
viewer may. No token is ever logged. Every call has a timeout; failures become
:class:`HubError` with a sentence for the page."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx

from jupyterhub_gpu.core.dashboard.payload import ClusterPayload
from jupyterhub_gpu.errors import BadPayload, HubError
from jupyterhub_gpu.wire.cluster import decode_payload
from jupyterhub_gpu.wire.jobs import JobView, decode_chunk, decode_jobs


def _message(response: httpx.Response) -> str:
    """The hub's own sentence from an error answer ("" when it has none)."""
    try:
        body = response.json()
    except ValueError:
        return ""
    text = body.get("message") if isinstance(body, dict) else None
    return str(text)[:300] if text else ""


class HubClient:
    def __init__(
        self, http: httpx.AsyncClient, api_url: str, token: str, timeout: float = 10.0
    ) -> None:
        self.http = http
        self.api_url = api_url.rstrip("/")
        self._token = token
        self.timeout = timeout

    async def _call(
        self, method: str, path: str, as_user: str = "", **kwargs: Any
    ) -> httpx.Response:
        token = as_user or self._token
        headers = {**kwargs.pop("headers", {}), "Authorization": f"token {token}"}
        try:
            return await self.http.request(
                method, self.api_url + path, headers=headers, timeout=self.timeout, **kwargs
            )
        except httpx.TimeoutException:
            raise HubError(
                f"The hub did not answer within {self.timeout:g} s; try again."
            ) from None
        except httpx.HTTPError as e:
            raise HubError(
                f"The hub could not be reached ({type(e).__name__}); try again."
            ) from None

    async def cluster(self) -> ClusterPayload:
        """The hub's ``GET /api/gpu/cluster``, typed by its one decoder
        (:func:`~jupyterhub_gpu.wire.cluster.decode_payload`); a malformed answer is a
        :class:`HubError` naming the bad field."""
        r = await self._call("GET", "/gpu/cluster")
        if r.status_code != 200:
            raise HubError(
                f"The hub refused the cluster view (HTTP {r.status_code}): "
                f"{_message(r) or 'is the dashboard configured with configure(c)?'}"
            )
        try:
            raw = r.json()
        except ValueError:
            raise HubError("The hub's cluster view is not JSON.") from None
        try:
            return decode_payload(raw)
        except BadPayload as e:
            raise HubError(f"The hub's cluster view is malformed ({e}).") from None

    async def stop_server(self, user: str, server: str) -> str:
        """Stop ``user``'s server (``""``: the default one); a sentence saying what happened."""
        path = f"/users/{quote(user, safe='')}/server"
        if server:
            path += f"s/{quote(server, safe='')}"
        r = await self._call("DELETE", path)
        what = f"Server {user}/{server}" if server else f"The default server of {user}"
        if r.status_code == 204:
            return f"{what} is stopped."
        if r.status_code == 202:
            return f"{what} is stopping; it may take a minute."
        if r.status_code == 404:
            raise HubError(f"{what} does not exist (stopped already?).", 404)
        if r.status_code == 400:
            raise HubError(f"{what} is not running: {_message(r)}", 400)
        raise HubError(f"The hub refused to stop it (HTTP {r.status_code}): {_message(r)}")

    async def drain(self, node: str, note: str, by: str) -> str:
        body = json.dumps({"note": note, "by": by})
        r = await self._call(
            "POST",
            f"/gpu/nodes/{quote(node, safe='')}/drain",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        return self._drain_answer(r, node)

    async def undrain(self, node: str, by: str) -> str:
        r = await self._call(
            "DELETE", f"/gpu/nodes/{quote(node, safe='')}/drain", params={"by": by}
        )
        return self._drain_answer(r, node)

    def _drain_answer(self, r: httpx.Response, node: str) -> str:
        if r.status_code == 200:
            return _message(r) or f"Node {node}: done."
        status = r.status_code if r.status_code in (400, 404, 503) else 502
        raise HubError(_message(r) or f"The hub refused (HTTP {r.status_code}).", status)

    # ------------------------------------------------------------------ jobs, as the viewer
    async def jobs(self, user_token: str, everyone: bool) -> list[JobView]:
        """The viewer's jobs (``everyone``: an admin's view of all), newest first."""
        params = {"all": "1"} if everyone else {}
        r = await self._call("GET", "/gpu/jobs", as_user=user_token, params=params)
        if r.status_code == 404:
            raise HubError("Batch jobs are not set up on this hub.", 404)
        if r.status_code != 200:
            raise HubError(f"The hub refused the list of jobs (HTTP {r.status_code}).")
        try:
            return decode_jobs(r.json())
        except (ValueError, BadPayload):
            raise HubError("The hub's list of jobs is malformed.") from None

    async def job_tail(self, user_token: str, job_id: str, size: int) -> str:
        """The last ``size`` bytes of a job's output ("" when there is none to read)."""
        path = f"/gpu/jobs/{quote(job_id, safe='')}/logs"
        r = await self._call("GET", path, as_user=user_token, params={"tail": str(size)})
        if r.status_code != 200:
            return ""
        try:
            return decode_chunk(r.json()).text
        except (ValueError, BadPayload):
            return ""

    async def cancel_job(self, user_token: str, job_id: str) -> str:
        """Cancel the viewer's job (an admin: anyone's); a sentence saying what happened."""
        r = await self._call("DELETE", f"/gpu/jobs/{quote(job_id, safe='')}", as_user=user_token)
        if r.status_code == 404:
            raise HubError(f"You have no job {job_id} (ended and gone, or not yours).", 404)
        if r.status_code != 200:
            raise HubError(
                f"The hub refused to cancel job {job_id} (HTTP {r.status_code}): {_message(r)}"
            )
        try:
            states = {j.state for j in decode_jobs(r.json())}
        except (ValueError, BadPayload):
            states = set()
        if states <= {"cancelled"} and states:
            return f"Job {job_id} is cancelled."
        return f"Job {job_id} is stopping: it got SIGTERM, and SIGKILL follows after the grace."
