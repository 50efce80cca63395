"""How the culler ends a server it culls (docs/culler.md, "Suspend instead of stop"): it
stops it through the hub's API, or, with ``suspend`` on, asks the hub to suspend it
(checkpointed, its GPUs freed, resumed at its next start) and stops it when the hub does
not. With ``suspend_reclaims_cells`` the culler judges a server it will suspend by
:func:`~jupyterhub_gpu.core.culling.idleness.judge`'s ``suspending`` rule (the first idle
gap when its GPU work was its kernels'), and warns it in suspend's words; a server the hub
does not suspend is remembered (per start, in the state file: :mod:`.state`) and judged,
and warned, as a stop from then on (:meth:`SuspendOrStop._refused`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import httpx
from traitlets import Bool, HasTraits

from jupyterhub_gpu.core.culling.idleness import Decision, Signal
from jupyterhub_gpu.core.culling.warning import CullWarning
from jupyterhub_gpu.services.culler import state as culler_state
from jupyterhub_gpu.services.culler.client import HubAPI, ask_suspend, describe_failure
from jupyterhub_gpu.wire.cull_notes import CullNote


class SuspendOrStop(HasTraits):
    """The ``suspend`` settings of :class:`~.app.GPUIdleCuller` and its culls' ending."""

    if TYPE_CHECKING:
        log: Any
        request_timeout: float
        _cull_warnings: dict[str, CullWarning]
        _suspend_refused: dict[str, str]  # "user/server@started" -> the hub's answer

        def _hub(self) -> HubAPI: ...

        async def _decide(
            self,
            sem: asyncio.Semaphore,
            user: Mapping[str, Any],
            full: str,
            server: Mapping[str, Any],
            now: datetime,
        ) -> Decision: ...

    suspend = Bool(
        False,
        help="""Ask the hub to suspend an idle server (checkpointed, its GPUs freed, resumed
        at its next start) instead of stopping it; stopped when the hub will not or cannot,
        once the stop's own waits are over and, with warnings on, after a warning that
        says "stopped" (docs/culler.md). ``configure_culler(c, suspend=True)`` sets both
        sides.""",
    ).tag(config=True)
    suspend_reclaims_cells = Bool(
        True,
        help="""With ``suspend``: a server whose GPU work was its kernels' (each GPU's last
        busy reading no later than its kernels' last activity plus ``gpu_window``: a
        cell's work) is suspended at its first idle gap, every signal idle for the
        timeout, without the memory-held waits (``gpu_held_idle``, ``gpu_loaded_idle``)
        or the pause-based one: the suspend keeps its kernels' state, which those waits
        protect for a stop. GPU work outside the kernels (a loop in a terminal, which
        may resume by itself) keeps every wait. A server the hub does not suspend (it
        answers 409 or 503) is judged by the stop's waits from then on, until it starts
        again (with warnings on, it is warned again, in the stop's words, before it is
        stopped; docs/culler.md). False: a suspend waits as long as a stop. Default:
        True (benchmarks/culling_returns.py, docs/culler.md "Tuning the defaults").""",
    ).tag(config=True)

    def _end_refusals(
        self, users: Sequence[Mapping[str, Any]], decisions: Mapping[str, Decision]
    ) -> None:
        """Forget the hub's refusals of servers gone, culled or started again."""
        kept = set()
        for user in users:
            for name, server in (user.get("servers") or {}).items():
                decision = decisions.get(f"{user['name']}/{name}" if name else str(user["name"]))
                if decision is not None and not decision.cull:
                    kept.add(self._key(f"{user['name']}/{name}", server))
        self._suspend_refused = {k: v for k, v in self._suspend_refused.items() if k in kept}

    @staticmethod
    def _key(holder: str, server: Mapping[str, Any]) -> str:
        """One start of one server: ``user/server@started`` (its warnings, its refusals)."""
        return f"{holder}@{server.get('started')}"

    def _suspending(self, holder: str, server: Mapping[str, Any]) -> bool:
        """Whether this server's idle cull will be a suspend: ``suspend`` is on and the hub
        has not refused to suspend this start of it."""
        return self.suspend and self._key(holder, server) not in self._suspend_refused

    async def _cull(
        self,
        sem: asyncio.Semaphore,
        user: Mapping[str, Any],
        name: str,
        server: Mapping[str, Any],
        decision: Decision,
        now: datetime,
    ) -> tuple[str, Decision, CullNote | None]:
        """Suspend (``suspend``) or stop a server ``decision`` culls. When the hub does not
        suspend it, an idle cull decided with suspend's rule and words is judged again by
        the stop's (:meth:`_refused`): never stopped sooner, nor without a warning that
        said "stopped"; any other cull is stopped, as before."""
        uname = str(user["name"])
        full = f"{uname}/{name}" if name else uname
        self.log.info("Culling %s: %s", full, decision.reason)
        # the note goes first: the hub's spawner reads it while stopping the server, to
        # record the allocation as culled rather than stopped (docs/accounting.md)
        note = CullNote(uname, name, now, decision.reason)
        culler_state.write_notes(self, [note])
        if self.suspend:
            try:
                async with sem:
                    suspended, said = await ask_suspend(self._hub(), uname, name)
            except httpx.HTTPError as e:
                return self._not_culled(full, decision, note, e)
            if suspended:
                self.log.info("Suspended %s: %s", full, said)
                return full, decision, note
            holder = full if "/" in full else f"{full}/"
            if decision.signal is Signal.IDLE and self._suspending(holder, server):
                culler_state.drop_note(self, note)
                return await self._refused(sem, user, name, server, said, now)
            self.log.warning("Not suspended %s (%s): stopping it", full, said)
        return await self._stop(sem, uname, name, decision, note)

    async def _stop(
        self, sem: asyncio.Semaphore, uname: str, name: str, decision: Decision, note: CullNote
    ) -> tuple[str, Decision, CullNote | None]:
        full = f"{uname}/{name}" if name else uname
        try:
            async with sem:
                code = await self._hub().stop_server(uname, name)
        except httpx.HTTPError as e:
            return self._not_culled(full, decision, note, e)
        if code == 202:
            self.log.info("Server %s is slow to stop", full)
        return full, decision, note

    def _not_culled(
        self, full: str, decision: Decision, note: CullNote, e: httpx.HTTPError
    ) -> tuple[str, Decision, None]:
        why = describe_failure(e, self.request_timeout)
        self.log.warning("Could not stop %s (%s); will retry next round", full, why)
        culler_state.drop_note(self, note)  # the stop did not happen
        return full, decision, None

    async def _refused(
        self,
        sem: asyncio.Semaphore,
        user: Mapping[str, Any],
        name: str,
        server: Mapping[str, Any],
        said: str,
        now: datetime,
    ) -> tuple[str, Decision, CullNote | None]:
        """The hub did not suspend a server the culler judged, and warned, as one it would
        suspend: from now on (until it starts again, across a restart of the culler too)
        it is judged as a stop, with the stop's waits, and warned afresh in the stop's
        words. It is stopped now only when that judgement says so at once (no warnings,
        ``warn_before`` 0, and the stop's waits over); else kept."""
        uname = str(user["name"])
        full = f"{uname}/{name}" if name else uname
        key = self._key(full if "/" in full else f"{full}/", server)
        self._suspend_refused[key] = said
        self._cull_warnings.pop(key, None)
        decision = await self._decide(sem, user, full, server, now)
        if not decision.cull:
            self.log.warning(
                "Not suspended %s (%s): judged as a stop from now on, kept (%s)",
                full,
                said,
                decision.reason,
            )
            return full, decision, None
        self.log.warning("Not suspended %s (%s): stopping it", full, said)
        note = CullNote(uname, name, now, decision.reason)
        culler_state.write_notes(self, [note])
        return await self._stop(sem, uname, name, decision, note)
