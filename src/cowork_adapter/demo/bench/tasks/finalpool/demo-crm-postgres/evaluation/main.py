"""Evaluation of demo-crm-postgres: checks the CRM rows by SQL (PG* from the environment)."""

import json

import psycopg2
from utils.task_script import evaluation_args, exit_with, read_groundtruth, verdict


def main():
    args = evaluation_args()
    expected = json.loads(read_groundtruth(args, "expected_crm.json"))
    conn = psycopg2.connect(connect_timeout=10)
    results = []
    with conn, conn.cursor() as cur:
        cur.execute("SELECT id, status FROM crm.customers")
        statuses = dict(cur.fetchall())
        for customer_id, status in sorted(expected["statuses"].items()):
            got = statuses.get(int(customer_id))
            results.append(verdict("customer %s is %s (got %s)" % (customer_id, status, got), got == status))
        cur.execute("SELECT customer_id, count(*) FROM crm.notes WHERE lower(body) = %s GROUP BY customer_id",
                    (expected["note"],))
        notes = dict(cur.fetchall())
        for customer_id in expected["noted"]:
            results.append(verdict("customer %s has one note %r (got %s)" % (
                customer_id, expected["note"], notes.get(customer_id, 0)), notes.get(customer_id) == 1))
        stray = sorted(set(notes) - set(expected["noted"]))
        results.append(verdict("no stray notes %s" % stray, not stray))
    conn.close()
    exit_with(all(results))


if __name__ == "__main__":
    main()
