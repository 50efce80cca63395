"""The Docker Engine's JSON message stream of a build and a push, read in one place. Pure.

Both ``POST /build`` and ``POST /images/{name}/push`` answer with a stream of JSON
objects (docker-py's ``decode=True`` yields them as dicts): ``stream`` (a build's log
text), ``status`` with ``id`` and ``progressDetail`` (a push's layers), ``aux`` (the
built image's ID; the pushed tag's digest and size) and ``error``/``errorDetail`` (a
failure reported inside a stream that itself succeeded). :func:`parse_message` is the
only reader of that format here; its in-band errors are read by
:func:`jupyterhub_gpu.core.progress.pull_error`, the same function the pull uses.
:class:`BuildLog` and :class:`PushLog` fold the messages into progress for the user and,
on failure, into a sentence that names the package that failed. What the user reads is
sentences of this module (:data:`INSTALLING`, :func:`installing`, ...), never the engine's
raw lines ("Step 5/9 : RUN [...]", "---> 0a1b", "Successfully tagged ..."): those are kept
(:attr:`BuildLog.tail`) only to name what failed.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyterhub_gpu.core.progress import pull_error
from jupyterhub_gpu.core.saving.data import PipRequirement, Progress

LINE_MAX = 300  #: characters of one log line shown to the user
_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_DIGEST = re.compile(r"digest: (sha256:[0-9a-f]{64}) size: (\d+)")


@dataclass(frozen=True)
class Message:
    """One message of the stream, with only the fields this module reads."""

    text: str = ""
    layer: str = ""
    current: int | None = None
    total: int | None = None
    error: str | None = None
    aux: Mapping[str, Any] = field(default_factory=dict)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def clean(text: str) -> str:
    """One line for people: control characters and escapes gone, cut to LINE_MAX."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    text = "".join(c if c.isprintable() else " " for c in text.strip())
    return text if len(text) <= LINE_MAX else text[: LINE_MAX - 3] + "..."


def parse_message(raw: Any) -> Message:
    """A decoded JSON message -> :class:`Message` (anything unexpected is ignored)."""
    if not isinstance(raw, Mapping):
        return Message()
    text = raw.get("stream")
    if not isinstance(text, str):
        status = raw.get("status")
        text = status if isinstance(status, str) else ""
    layer = raw.get("id")
    detail = raw.get("progressDetail")
    detail = detail if isinstance(detail, Mapping) else {}
    aux = raw.get("aux")
    return Message(
        text=text,
        layer=layer if isinstance(layer, str) else "",
        current=_int(detail.get("current")),
        total=_int(detail.get("total")),
        error=pull_error(raw),
        aux=aux if isinstance(aux, Mapping) else {},
    )


def _name_pattern(name: str) -> re.Pattern[str]:
    """``name`` as it may appear in pip's output: any of ``-_.`` between its words."""
    words = [re.escape(w) for w in re.split(r"[-_.]+", name)]
    return re.compile(r"(?<![A-Za-z0-9])" + "[-_.]".join(words) + r"(?![A-Za-z0-9])", re.I)


BUILDING = "Building the image"  #: the build's first line (edges/builder/build.py)
REMOVING = "Removing the base image's copies of the packages you replaced"
ADDING = "Adding the installed packages to your image"
UPLOADING = "Uploading it to the site's registry"  #: the push's first line


def installing(count: int) -> str:
    """The sentence of pip's step: how many packages go into the image."""
    return f"Installing {count} package{'' if count == 1 else 's'} into the image"


def installing_one(req: PipRequirement, k: int, n: int) -> str:
    """pip's step reached one package (``k`` of ``n``)."""
    return f"Installing {req.name} {req.version} ({k} of {n})"


def uploaded(percent: int | None) -> str:
    """The push's figure, one line that the next figure replaces (:func:`condense`)."""
    return f"Uploading: {percent if percent is not None else 0}%"


def _step_words(instruction: str, requirements: Sequence[PipRequirement]) -> str | None:
    """What a step of the recipe (core/saving/recipe.py) does, for the user; None for the
    steps that say nothing to them (FROM, LABEL, ARG, ENV, USER, copying the wheels in,
    collecting the installed files)."""
    if instruction.startswith("RUN [") and '"pip", "install"' in instruction:
        return installing(len(requirements))
    if instruction.startswith("RUN [") and '"pip", "uninstall"' in instruction:
        return REMOVING
    if instruction.startswith("COPY --from=install "):
        return ADDING
    return None


class BuildLog:
    """A saved image's build, one message at a time: step, log tail, image ID, failure.

    :meth:`add` answers the user's sentence for a step that does something they asked
    for (installing their packages, one by one, replacing the base's copies, adding them
    to the image), with the build's percent; the engine's own lines stay in
    :attr:`tail`, for :meth:`failure`."""

    def __init__(self, requirements: Sequence[PipRequirement] = ()) -> None:
        self.requirements = tuple(requirements)
        self.step = (0, 0)
        self.instruction = ""
        self.processed = 0
        self.image_id = ""
        self.tail: deque[str] = deque(maxlen=50)

    def add(self, message: Message) -> Progress | None:
        """Fold one message in; the user's sentence to show, if this step says one."""
        if message.aux.get("ID"):
            self.image_id = str(message.aux["ID"])
        if message.error:
            self.tail.append(clean(message.error))
            return None
        shown = None
        for line in message.text.splitlines():
            line = clean(line)
            if not line or line.startswith("--->"):
                continue
            self.tail.append(line)
            words = None
            step = _STEP.match(line)
            if step:
                self.step = (int(step.group(1)), int(step.group(2)))
                self.instruction = step.group(3)
                words = _step_words(self.instruction, self.requirements)
            elif line.startswith("Processing "):
                self.processed += 1
                req = self.culprit(line)
                if req is not None:
                    words = installing_one(req, self.processed, len(self.requirements))
            if words is not None:
                shown = Progress("build", words, self.percent)
        return shown

    @property
    def percent(self) -> int | None:
        """Steps done, and within pip's step the packages it has processed."""
        k, n = self.step
        if not n:
            return None
        within = 0.0
        if self.requirements and '"pip", "install"' in self.instruction:
            within = min(1.0, self.processed / len(self.requirements))
        return min(99, int(100 * (k - 1 + within) / n))

    def culprit(self, line: str) -> PipRequirement | None:
        """The requirement ``line`` names (the longest name that fits wins)."""
        for req in sorted(self.requirements, key=lambda r: -len(r.name)):
            if _name_pattern(req.name).search(line):
                return req
        return None

    def failure(self, error: str) -> str:
        """The sentence for a failed build: the package that failed and pip's line, or
        the step and the engine's message."""
        errors = [x for x in self.tail if x.startswith("ERROR:") or "Error:" in x]
        for line in reversed(errors or [clean(error)]):
            req = self.culprit(line)
            if req is not None:
                return (
                    f"Package {req.spec!r} failed: {_stop(line)} Remove it from your "
                    "environment, or ask your admin, and save again."
                )
        last = errors[-1] if errors else clean(error)
        k, n = self.step
        where = f" at step {k}/{n}" if n else ""
        return f"The image could not be built{where}: {_stop(last)} Nothing was saved."


def _stop(line: str) -> str:
    """``line`` ending with a full stop."""
    return line if line.endswith((".", "!", "?")) else line + "."


class PushLog:
    """A push, one message at a time: bytes per layer, and the digest at the end. Each
    percent is shown once (a real engine sends one message per chunk and layer)."""

    def __init__(self) -> None:
        self.layers: dict[str, tuple[int, int]] = {}  # id -> (done bytes, total bytes)
        self.digest = ""
        self.size: int | None = None
        self.shown: int | None = None  # the percent last shown: each is shown once

    def add(self, message: Message) -> Progress | None:
        if isinstance(message.aux.get("Digest"), str):
            self.digest = message.aux["Digest"]
            self.size = _int(message.aux.get("Size"))
        found = _DIGEST.search(message.text)
        if found and not self.digest:
            self.digest, self.size = found.group(1), int(found.group(2))
        if message.error or not message.layer:
            return None
        done, total = self.layers.get(message.layer, (0, 0))
        if message.text == "Pushing" and message.total:
            total = max(total, message.total)
            done = min(message.current or 0, total)
        elif message.text in ("Pushed", "Layer already exists") or message.text.startswith(
            "Mounted from"
        ):
            done = total
        else:
            self.layers.setdefault(message.layer, (done, total))
            return None
        self.layers[message.layer] = (done, total)
        percent = self.percent
        if percent == self.shown:  # a real push repeats its figures many times over
            return None
        self.shown = percent
        return Progress("push", uploaded(percent), percent)

    @property
    def percent(self) -> int | None:
        total = sum(t for _, t in self.layers.values())
        if not total:
            return None
        return int(100 * sum(d for d, _ in self.layers.values()) / total)


SHOWN_LINES = 12  #: lines of a save's log a user reads (the newest)


def condense(events: Sequence[Mapping[str, Any]], keep: int = SHOWN_LINES) -> list[dict[str, Any]]:
    """A save's progress lines as a person follows them: a run of push figures
    ("Uploading: N%", one per percent) is its latest one, and only the newest ``keep`` lines are
    shown, after one line that says how many earlier ones there were. The progress
    bar's figure (the last ``percent``) is kept."""
    out: list[dict[str, Any]] = []
    for event in events:
        if out and event.get("phase") == "push" and out[-1].get("phase") == "push":
            out[-1] = dict(event)
        else:
            out.append(dict(event))
    if len(out) <= keep:
        return out
    hidden = len(out) - (keep - 1)
    first = {"phase": out[0].get("phase", ""), "message": f"... {hidden} earlier lines"}
    last = [e for e in out if "percent" in e][-1:]
    tail = out[-(keep - 1) :]
    if last and "percent" not in tail[-1] and all("percent" not in e for e in tail):
        first["percent"] = last[0]["percent"]
    return [first, *tail]
