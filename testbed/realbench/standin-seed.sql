-- cowork-adapter test bed: a STAND-IN for the pinned Cowork Bench's db/init.sql.gz.
-- The real seed (blob 915a69fd..., over 4 MiB) is missing from the benchmark's public snapshot.
-- This stand-in seeds no rows. It creates only what the unchanged runner itself touches after
-- PostgreSQL starts: its foreign-key fix-up drops and re-adds
-- email.sent_log.sent_log_message_id_fkey, so both tables and that constraint must exist.
-- Tasks that read seeded rows fail here for the environment's reason; the test bed's task list
-- (testbed/realbench/tasks.txt) holds tasks whose preprocess steps read none.
CREATE SCHEMA IF NOT EXISTS email;

CREATE TABLE email.messages (
    id          SERIAL PRIMARY KEY,
    folder      TEXT NOT NULL DEFAULT 'INBOX',
    sender      TEXT,
    recipients  TEXT,
    subject     TEXT,
    body        TEXT,
    sent_at     TIMESTAMPTZ DEFAULT now()
);

CREATE TABLE email.sent_log (
    id          SERIAL PRIMARY KEY,
    message_id  INTEGER,
    sent_at     TIMESTAMPTZ DEFAULT now(),
    CONSTRAINT sent_log_message_id_fkey FOREIGN KEY (message_id) REFERENCES email.messages(id)
);
