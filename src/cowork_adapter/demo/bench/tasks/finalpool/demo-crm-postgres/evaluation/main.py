"""Evaluation of demo-crm-postgres: checks the CRM rows by SQL (PG* from the environment)."""

import argparse
import json
import os
import sys

import psycopg2


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--res_log_file", required=True)
    parser.add_argument("--agent_workspace", required=True)
    parser.add_argument("--groundtruth_workspace", required=True)
    parser.add_argument("--launch_time", required=False, default="")
    return parser.parse_args()


def main():
    args = parse_args()
    with open(os.path.join(args.groundtruth_workspace, "expected_crm.json")) as fh:
        expected = json.load(fh)
    conn = psycopg2.connect(connect_timeout=10)
    failures = 0
    with conn, conn.cursor() as cur:
        cur.execute("SELECT id, status FROM crm.customers")
        statuses = dict(cur.fetchall())
        for customer_id, status in sorted(expected["statuses"].items()):
            got = statuses.get(int(customer_id))
            ok = got == status
            failures += 0 if ok else 1
            print("[%s] customer %s is %s (got %s)" % ("PASS" if ok else "FAIL", customer_id, status, got))
        cur.execute("SELECT customer_id, count(*) FROM crm.notes WHERE lower(body) = %s GROUP BY customer_id",
                    (expected["note"],))
        notes = dict(cur.fetchall())
        for customer_id in expected["noted"]:
            ok = notes.get(customer_id) == 1
            failures += 0 if ok else 1
            print("[%s] customer %s has one note %r (got %s)" % ("PASS" if ok else "FAIL", customer_id,
                                                               expected["note"], notes.get(customer_id, 0)))
        stray = sorted(set(notes) - set(expected["noted"]))
        failures += 1 if stray else 0
        print("[%s] no stray notes %s" % ("FAIL" if stray else "PASS", stray))
    conn.close()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
