"""Every secret of a PostgreSQL DSN is masked wherever a DSN is printed (RUN-CLI-2).

A fresh user's find: ``sslpassword`` (the SSL key's password) was shown in clear by
``check --log``, ``runs list`` (text and the JSON ``message`` and ``target``) and
``store check``; only ``password`` was masked. The secret parameters are those libpq marks
as password fields (password, sslpassword, oauth_client_secret) and the SCRAM keys; file
paths (sslkey, passfile, ...) stay readable. No server is needed: 127.0.0.1 port 1
refuses the connection, and the error quotes the (masked) DSN.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from runx_actors.cli import main
from runx_actors.store._check import (
    SECRET_PARAMETERS,
    dsn_secrets,
    redact_dsn,
    secret_parameters,
)

pytest.importorskip("psycopg")

#: one DSN per form libpq accepts, each with the secrets "hunter2"/"zz9 top" (decoded)
FORMS = {
    "uri query": "postgresql://127.0.0.1:1/db?sslpassword=hunter2",
    "uri userinfo + query": "postgresql://u:hunter2@127.0.0.1:1/db?sslpassword=hunter2"
                            "&oauth_client_secret=hunter2",
    "uri percent-encoded": "postgresql://127.0.0.1:1/db?sslpassword=hun%74er2"
                           "&password=%68unter2",
    "conninfo": "host=127.0.0.1 port=1 dbname=db sslpassword=hunter2",
    "conninfo quoted": "host=127.0.0.1 port=1 dbname=db sslpassword='zz9 top' "
                       "password = 'zz9 top'",
    "conninfo escaped quote": r"host=127.0.0.1 port=1 sslpassword='zz9 top\'s'",
    "scram keys": "host=127.0.0.1 port=1 scram_client_key=hunter2 scram_server_key=hunter2",
}
SECRETS = ("hunter2", "zz9 top", "zz9", "hun%74er2", "%68unter2")


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


@pytest.mark.parametrize("form", FORMS)
def test_redact_dsn_masks_every_secret_in_every_form(form: str) -> None:
    shown = redact_dsn(FORMS[form])
    assert not _leaks(shown), shown
    assert "=***" in shown and "127.0.0.1" in shown
    # the values as libpq decodes them (what a driver message would quote)
    assert set(dsn_secrets(FORMS[form])) <= {"hunter2", "zz9 top", "zz9 top's"}
    assert dsn_secrets(FORMS[form])


def test_paths_are_not_secrets_and_libpq_agrees_on_the_list() -> None:
    """sslkey / sslcert / passfile are file paths: they stay readable. Every option the
    installed libpq marks as a password field is in the documented fixed list (a newer
    libpq's new one is masked anyway, by secret_parameters(); this says the list is
    stale)."""
    from psycopg import pq

    shown = redact_dsn("host=h sslkey=/k/client.key sslcert=/k/c.crt passfile=/k/pgpass "
                       "sslpassword=hunter2")
    assert "sslkey=/k/client.key" in shown and "passfile=/k/pgpass" in shown
    assert "sslpassword=***" in shown
    marked = {o.keyword.decode() for o in pq.Conninfo.get_defaults() if o.dispchar == b"*"}
    assert {"password", "sslpassword"} <= marked <= SECRET_PARAMETERS
    assert marked <= secret_parameters()


COMMANDS = {
    "check --log": lambda dsn: ["check", "--log", dsn],
    "runs list": lambda dsn: ["runs", "list", "--store", dsn],
    "runs show": lambda dsn: ["runs", "show", "r", "--store", dsn],
    "store check": lambda dsn: ["store", "check", dsn],
}


@pytest.mark.parametrize("form", ["uri query", "conninfo quoted", "uri percent-encoded"])
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("as_json", [False, True])
def test_no_command_prints_a_dsn_secret(command: str, form: str, as_json: bool) -> None:
    args = COMMANDS[command](FORMS[form]) + (["--json"] if as_json else [])
    result = CliRunner().invoke(main, args, env={"RUNX_ACTORS_STORE": ""},
                                catch_exceptions=False)
    assert result.exit_code not in (0, 64), result.output  # unreachable, not a usage error
    assert "127.0.0.1" in result.output and "=***" in result.output, result.output
    assert not _leaks(result.output), result.output
    if as_json:
        doc = json.loads(result.stdout.strip().splitlines()[-1])
        for field in ("message", "target"):
            if field in doc:
                assert not _leaks(str(doc[field])), doc


@pytest.mark.parametrize("form", ["uri query", "conninfo quoted", "uri userinfo + query"])
async def test_open_postgres_store_never_holds_a_dsn_secret(form: str) -> None:
    """The API path (RUN-CLI-2): StoreUnreachableError's message and target are masked."""
    from runx_actors.store.postgres import StoreUnreachableError, open_postgres_store

    with pytest.raises(StoreUnreachableError) as err:
        async with open_postgres_store(FORMS[form], timeout=1):
            pass  # pragma: no cover
    exc = err.value
    target = str(getattr(exc, "target", ""))
    assert not _leaks(str(exc)) and not _leaks(target), (str(exc), target)
    assert "=***" in target
