"""The session's PostgreSQL server for tests (:class:`tests.support.postgres.PostgresServer`).

Import the fixture into a test module (or a conftest)::

    from tests.support.pg_fixture import postgres_url  # noqa: F401

``postgres_url`` is the SQLAlchemy URL (``postgresql+psycopg://jhgpu@127.0.0.1:PORT/jhgpu``)
of one throw-away server started for the whole session and removed at its end. Without
PostgreSQL's server binaries the fixture FAILS (it never skips: a test that silently
did not run is a test that passed for nothing) and says how to install them.

pytest defines a fixture once per module that holds it: modules that each import
``postgres_url`` get a server each (about 1 s to start); import it into a conftest instead
to share one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from tests.support.postgres import PostgresError, PostgresServer


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """One server for the session (self-contained: importing this name is enough)."""
    server = PostgresServer()
    problem = None
    try:
        server.start()
    except PostgresError as e:
        problem = str(e)
    if problem is not None:  # outside the except: the message alone, no exception chain
        if "cluster.sh" not in problem:
            problem += "\n(scripts/cluster.sh up installs PostgreSQL's server.)"
        pytest.fail(f"No PostgreSQL test server: {problem}", pytrace=False)
    try:
        yield server.url
    finally:
        server.stop()


def fresh_postgres_database(server_url: str) -> str:
    """A new, empty database on the server of ``server_url``; its SQLAlchemy URL."""
    url = make_url(server_url)
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = url.set(drivername="postgresql", database="postgres")
    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as c:
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return url.set(database=name).render_as_string(hide_password=False)
