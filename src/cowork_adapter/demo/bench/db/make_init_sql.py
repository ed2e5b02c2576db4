"""Regenerates init.sql.gz, the demo benchmark's PostgreSQL seed, byte for byte.

    python3 db/make_init_sql.py        (from the benchmark root)

The gzip header carries no name and mtime 0, so the same SQL always gives the same bytes
(with the same zlib). The runner mounts the result into each task's postgres:15 container.
"""

import gzip
import io
import os

SEED_SQL = """\
-- Demo benchmark seed: a tiny CRM for the PostgreSQL-backed demo task.
CREATE SCHEMA crm;

CREATE TABLE crm.customers (
    id integer PRIMARY KEY,
    name text NOT NULL,
    region text NOT NULL,
    status text NOT NULL CHECK (status IN ('lead', 'active', 'churned')),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE crm.notes (
    id serial PRIMARY KEY,
    customer_id integer NOT NULL REFERENCES crm.customers (id),
    body text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO crm.customers (id, name, region, status) VALUES
    (1, 'Aurora Foods', 'north', 'active'),
    (2, 'Borealis Ltd', 'north', 'lead'),
    (3, 'Cedar Logistics', 'south', 'lead'),
    (4, 'Delta Textiles', 'east', 'churned'),
    (5, 'Elm & Co', 'west', 'lead'),
    (6, 'Fjord Analytics', 'north', 'active');

INSERT INTO crm.notes (customer_id, body) VALUES
    (1, 'renewal due in Q4'),
    (4, 'lost to a competitor');
"""


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as gz:
        gz.write(SEED_SQL.encode("utf-8"))
    with open(os.path.join(here, "init.sql.gz"), "wb") as fh:
        fh.write(buffer.getvalue())


if __name__ == "__main__":
    main()
