"""Preprocess of demo-crm-postgres: put this task's CRM rows back into their seed state."""

import psycopg2
from utils.task_script import fresh_workspace, preprocess_args


def main():
    args = preprocess_args()
    fresh_workspace(args.agent_workspace)
    # PG* come from the container env (the task's own database).
    conn = psycopg2.connect(connect_timeout=10)
    with conn, conn.cursor() as cur:
        cur.execute("DELETE FROM crm.notes WHERE customer_id IN (2, 3, 5)")
        cur.execute("UPDATE crm.customers SET status = 'lead' WHERE id IN (2, 3, 5)")
    conn.close()
    print("preprocess: crm rows 2, 3, 5 reset to lead without notes")


if __name__ == "__main__":
    main()
