"""What a `--campaign-db` URL may carry: no password in any part of it.

The URL is in argv (every user of the host reads it in the process list) and is recorded in the
manifest and in messages, so a password must come from libpq's own places (PGPASSWORD, ~/.pgpass).
libpq takes one from the user part (`user:secret@`) and from the `password` and `sslpassword`
query parameters, their names percent-decoded and in any case; each is refused here, before any
connection or file. Pure: no psycopg2, so the flag checks stay cheap.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit

# libpq connection parameters whose value is a secret (passfile and sslkey only name files).
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})

PASSWORD_SENTENCE = (
    "--campaign-db must not carry a password (in its user part or as a query parameter); "
    "give it in PGPASSWORD or ~/.pgpass."
)


def password_part(url: str) -> str | None:
    """Where `url` carries a password ("user part", "query parameter NAME"), or None. Raises ValueError
    for a URL that cannot be split."""
    parts = urlsplit(url)
    if parts.password is not None:  # `user:secret@`, an empty secret included
        return "user part"
    for name, _value in parse_qsl(parts.query, keep_blank_values=True):
        if unquote(name).strip().lower() in SECRET_PARAMETERS:
            return f"query parameter {unquote(name).strip().lower()}"
    return None
