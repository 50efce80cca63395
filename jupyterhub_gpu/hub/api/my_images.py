"""Saved images through the hub: the REST API and the "My images" page (an edge).

    GET    /hub/api/gpu/users/{user}/images          images {user} may start, and saving's state
    POST   /hub/api/gpu/users/{user}/images          {"server": "", "name": "my-env",
                                                      "conda_envs": [...]}: save (202)
    GET    /hub/api/gpu/users/{user}/save            the latest save: state and progress lines
    PATCH  /hub/api/gpu/users/{user}/images/{name}   {"shared_with": "group" or null}
    DELETE /hub/api/gpu/users/{user}/images/{name}   delete (registry and record) (204)
    GET    /hub/my-images                            the page (the user's own images)

The scopes are JupyterHub's own for a user's servers: ``read:servers`` to look, ``servers``
to save, share and delete. A user holds them for themselves only (the ``user`` role's
``self``); an admin for everyone. Errors are JupyterHub's JSON ``{status, message}``.
Added to a hub's configuration by :func:`~jupyterhub_gpu.hub.extensions.configure_my_images`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from jupyterhub_gpu.core.identity import Identity
from jupyterhub_gpu.core.saving.entries import base_of, saved_entries, visible, with_saved
from jupyterhub_gpu.errors import UserFacingError
from jupyterhub_gpu.hub.runtime import runtime_of
from jupyterhub_gpu.hub.saves import MyImages, ServerFacts, image_json

NAME = r"[a-z0-9][a-z0-9._-]{0,63}"
MAX_CONDA_ENVS = 20
_SERVER_RE = re.compile(r"^[^/]{0,255}$")


def base_name(catalog: Any, slug: str) -> str:
    """The catalog's display name of a saved image's base (what the spawn form shows),
    else its slug (an entry since removed from the catalog)."""
    entry = catalog.get(slug) if catalog is not None else None
    return str(entry.display_name) if entry is not None and entry.display_name else slug


class _Base(APIHandler):
    async def _context(self, user_name: str) -> tuple[Any, Any, MyImages, Identity]:
        """The user, their default spawner (it reads the user's identity and home), the
        hub's saved-images service (its runtime's: :func:`runtime_of`) and the user's
        identity."""
        user = self.find_user(user_name)
        if user is None:
            raise web.HTTPError(404, f"No user {user_name!r}.")
        spawner = user.spawner
        if not (hasattr(spawner, "identity") and hasattr(spawner, "home_host_path")):
            raise web.HTTPError(503, "Saved images need GPUDockerSpawner as the hub's spawner.")
        try:
            ident = await spawner.identity()
        except UserFacingError as e:
            raise web.HTTPError(e.status_code, str(e)) from None
        runtime = runtime_of(self.settings)
        runtime.start_from(self.settings, self.log)
        return user, spawner, runtime.saved_images(self.log), ident

    def _json_object(self) -> dict[str, Any]:
        body = self.get_json_body()
        if not isinstance(body, dict):
            raise web.HTTPError(400, "Send a JSON object.")
        return body

    async def _running_image(self, spawner: Any) -> str:
        """The image the server's container was created from (the container says; the
        spawner's ``image`` is only known in the hub that started it)."""
        try:
            info = await spawner.docker("inspect_container", spawner.object_id)
        except Exception:
            self.log.warning("Could not inspect %s's container for a save", spawner._log_name)
            raise web.HTTPError(
                503,
                f"Node {spawner.node_name} did not answer about your server; try again in a "
                "minute.",
            ) from None
        return str((info.get("Config") or {}).get("Image") or spawner.image)

    @staticmethod
    def _fail(e: UserFacingError) -> web.HTTPError:
        return web.HTTPError(e.status_code, str(e))


class ImagesAPIHandler(_Base):
    @needs_scope("read:servers")
    async def get(self, user_name: str) -> None:
        user, spawner, service, ident = await self._context(user_name)
        try:
            images = visible(await service.images(), user.name, ident.groups)
        except UserFacingError as e:
            raise self._fail(e) from None
        limits = service.settings
        job = service.job(user.name)
        home = spawner.home_host_path(ident)
        envs: tuple[str, ...] = ()
        if home is not None and service.settings.enabled:
            envs = await service.conda_envs(user.name, home)  # cached, bounded, off the loop
        self.write(
            json.dumps(
                {
                    "saving": service.settings.enabled,
                    "images": [
                        {
                            **image_json(i),
                            "image": f"saved:{i.owner}/{i.name}",
                            "base_name": base_name(spawner.catalog, i.base_slug),
                        }
                        for i in images
                    ],
                    "groups": sorted(ident.groups),
                    "conda_envs": list(envs),
                    "limits": {
                        "max_images": limits.max_images or None,
                        "max_image_gib": limits.max_image_gib or None,
                        "max_total_gib": limits.max_total_gib or None,
                    },
                    "save": job.as_json() if job else None,
                    "running_servers": sorted(name for name, s in user.spawners.items() if s.ready),
                }
            )
        )

    @needs_scope("servers")
    async def post(self, user_name: str) -> None:
        user, _spawner, service, ident = await self._context(user_name)
        body = self._json_object()
        unknown = sorted(set(body) - {"server", "name", "conda_envs"})
        if unknown:
            raise web.HTTPError(
                400, f"Unknown field {unknown[0]!r}; send 'name', 'server' and 'conda_envs'."
            )
        envs = body.get("conda_envs", [])
        if (
            not isinstance(envs, list)
            or len(envs) > MAX_CONDA_ENVS
            or not all(isinstance(e, str) and 0 < len(e) <= 255 for e in envs)
        ):
            raise web.HTTPError(
                400,
                f"'conda_envs' must be a list of at most {MAX_CONDA_ENVS} environment names "
                "from your home, as My images lists them.",
            )
        server = body.get("server", "")
        if not isinstance(server, str) or not _SERVER_RE.match(server):
            raise web.HTTPError(400, "'server' must be the name of one of your servers.")
        running = user.spawners.get(server)
        if running is None or not running.ready:
            raise web.HTTPError(
                409,
                f"Your server {server or '(default)'} is not running; start it, install "
                "what you need, then save.",
            )
        try:
            images = await service.images()
            catalog = with_saved(
                running.catalog, saved_entries(running.catalog, images, user.name, ident.groups)[0]
            )
            chosen = str((running.user_options or {}).get("image", ""))
            base = base_of(catalog, chosen)
            if base is None:
                raise web.HTTPError(
                    409,
                    "The image your server runs is no longer in the catalog, so it can't be "
                    "saved; start a server from the catalog.",
                )
            parent = next((i for i in images if f"saved:{i.owner}/{i.name}" == chosen), None)
            facts = ServerFacts(
                owner=user.name,
                server=server,
                node=running.node_name,
                image=await self._running_image(running),
                base_slug=base.slug,
                home=running.home_host_path(ident),
                parent_bytes=parent.size_bytes if parent else 0,
                conda_envs=tuple(envs),
            )
            job = await service.start(facts, body.get("name"))  # type: ignore[arg-type]
        except UserFacingError as e:
            raise self._fail(e) from None
        self.set_status(202)
        self.write(json.dumps(job.as_json()))


class SaveAPIHandler(_Base):
    @needs_scope("read:servers")
    async def get(self, user_name: str) -> None:
        user, _spawner, service, _ident = await self._context(user_name)
        job = service.job(user.name)
        if job is None:
            raise web.HTTPError(404, "No save since the hub started.")
        self.write(json.dumps(job.as_json()))


class ImageAPIHandler(_Base):
    @needs_scope("servers")
    async def patch(self, user_name: str, name: str) -> None:
        user, _spawner, service, ident = await self._context(user_name)
        body = self._json_object()
        if set(body) != {"shared_with"}:
            raise web.HTTPError(400, 'Send {"shared_with": "a group of yours"} or null.')
        group = body["shared_with"]
        if group is not None and not isinstance(group, str):
            raise web.HTTPError(400, "'shared_with' must be a group name or null.")
        try:
            image = await service.share(user.name, name, group or None, ident.groups)
        except UserFacingError as e:
            raise self._fail(e) from None
        self.log.info("%s shared saved image %s with %s", user.name, name, group or "nobody")
        self.write(json.dumps(image_json(image)))

    @needs_scope("servers")
    async def delete(self, user_name: str, name: str) -> None:
        user, _spawner, service, _ident = await self._context(user_name)
        try:
            await service.delete(user.name, name)
        except UserFacingError as e:
            raise self._fail(e) from None
        self.set_status(204)


class MyImagesPage(BaseHandler):
    """The page: the user's images and those shared with them, saving with its progress,
    sharing and deleting (the page calls the API above with the hub's XSRF token)."""

    @web.authenticated
    async def get(self) -> None:
        user = self.current_user
        html = await self.render_template("my_images.html", user=user)
        self.finish(html)


HANDLERS: list[tuple[str, type]] = [
    (r"/api/gpu/users/(?P<user_name>[^/]+)/images", ImagesAPIHandler),
    (r"/api/gpu/users/(?P<user_name>[^/]+)/save", SaveAPIHandler),
    (rf"/api/gpu/users/(?P<user_name>[^/]+)/images/(?P<name>{NAME})", ImageAPIHandler),
    (r"/my-images", MyImagesPage),
]
