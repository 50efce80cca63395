"""`jupyterhub-gpu db current|upgrade` on a site's SQLite accounting database: the URL
from the site's configuration, a fresh database created, no traceback for a bad site
configuration (PostgreSQL and an older revision: tests/integration/test_accounting_postgres.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyterhub_gpu import cli

pytestmark = pytest.mark.unit

#: the newest migration, read from the folder (not from the code under test)
VERSIONS = Path(cli.__file__).parents[1] / "edges" / "accounting" / "migrations" / "versions"
HEAD = max(p.name[:4] for p in VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))


def test_db_commands_find_the_sites_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    etc, state = tmp_path / "etc", tmp_path / "state"
    argv = ["site", "init", "--etc", str(etc), "--state", str(state), "--hub-ip", "10.0.0.1"]
    assert cli.main(argv) == 0
    capsys.readouterr()
    db = state / "accounting.sqlite"
    assert cli.main(["db", "current", "--etc", str(etc)]) == 1
    assert capsys.readouterr().err.startswith(f"sqlite:///{db}: no accounting tables")
    assert not db.exists()  # looking never creates it
    assert cli.main(["db", "upgrade", "--etc", str(etc)]) == 0
    assert capsys.readouterr().out == (
        f"sqlite:///{db}: upgraded from nothing (tables created) to {HEAD}.\n"
    )
    assert cli.main(["db", "current", "--etc", str(etc)]) == 0
    assert capsys.readouterr().out == f"sqlite:///{db}: revision {HEAD}, the newest.\n"
    (etc / "jupyterhub_config.py").write_text("c = get_config()\nraise ValueError('oops')\n")
    assert cli.main(["db", "current", "--etc", str(etc)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jupyterhub-gpu db: {etc}/jupyterhub_config.py: oops;"), err
    assert "Traceback" not in err
