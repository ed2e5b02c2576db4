"""Demo MCP server `crm`: customers and notes in PostgreSQL (schema crm of the demo seed).

Runs over stdio on the mcp SDK (1.x). Connection from PG_HOST/PG_PORT/PG_DATABASE/PG_USER/
PG_PASSWORD; every call opens a short connection, so the server holds no state of its own.
"""

import os

import psycopg2
import psycopg2.extras
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("crm", log_level="WARNING")
STATUSES = ("lead", "active", "churned")


def _connect():
    return psycopg2.connect(
        host=os.environ.get("PG_HOST", "localhost"),
        port=int(os.environ.get("PG_PORT", "5432")),
        dbname=os.environ.get("PG_DATABASE", "cowork_gym"),
        user=os.environ.get("PG_USER", "eigent"),
        password=os.environ.get("PG_PASSWORD", ""),
        connect_timeout=10,
    )


@mcp.tool()
def list_customers(status: str = "") -> list:
    """Customers as {id, name, region, status}; filter by status when given."""
    with _connect() as conn, conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        if status:
            cur.execute("SELECT id, name, region, status FROM crm.customers WHERE status = %s ORDER BY id", (status,))
        else:
            cur.execute("SELECT id, name, region, status FROM crm.customers ORDER BY id")
        return [dict(row) for row in cur.fetchall()]


@mcp.tool()
def update_customer_status(customer_id: int, status: str) -> dict:
    """Set a customer's status (lead, active or churned); returns the updated row."""
    if status not in STATUSES:
        raise ValueError("status must be one of %s" % ", ".join(STATUSES))
    with _connect() as conn, conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute(
            "UPDATE crm.customers SET status = %s, updated_at = now() WHERE id = %s "
            "RETURNING id, name, region, status",
            (status, customer_id),
        )
        row = cur.fetchone()
    if row is None:
        raise ValueError("no customer with id %s" % customer_id)
    return dict(row)


@mcp.tool()
def add_note(customer_id: int, body: str) -> dict:
    """Attach a note to a customer; returns {id, customer_id, body}."""
    with _connect() as conn, conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute(
            "INSERT INTO crm.notes (customer_id, body) VALUES (%s, %s) RETURNING id, customer_id, body",
            (customer_id, body),
        )
        return dict(cur.fetchone())


if __name__ == "__main__":
    mcp.run(transport="stdio")
