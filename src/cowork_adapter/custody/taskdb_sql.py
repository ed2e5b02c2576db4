"""The SQL and the process sweep the task database probe runs (custody/taskdb_probe.py; issue 36).

Standard library only (Python 3.10), copied beside the docker shim with the probe. Every name is
schema-qualified (pg_catalog) on top of the session's pinned search_path, and every identifier the
agent chose is quoted here (quote_ident), never spliced.
"""

# Per table: row digests kept (a row-level diff) up to this many rows, 64 bits each (enough to count
# rows added / changed / removed; the content digest covers every row). The eval-time file keeps them
# only for tables whose content moved, so a task's evidence is about one baseline's worth.
ROW_BOUND = 1000
ROW_HASH_CHARS = 16
FIRST_USER_OID = 16384  # FirstNormalObjectId: every oid below is the server's own
# Server processes that are not sessions: never terminated through SQL (the postmaster's own).
AUX_BACKENDS = (
    "autovacuum launcher",
    "logical replication launcher",
    "background writer",
    "checkpointer",
    "walwriter",
    "archiver",
    "startup",
    "walreceiver",
    "walsender",
    "autovacuum worker",
)

# What the host sees of every process in the pg container, run as the postgres user (the agent's
# uid through COPY ... TO PROGRAM; a process it cannot read is not the agent's). $1: "strays" or
# "strict PID...". Kept: the postmaster (PID 1, the image execs postgres) and, in "strays" mode,
# its children running the server binary; in "strict" mode only the listed server pids.
STRAY_SCRIPT = r"""
mode=$1; shift; allowed=" $* "
pgexe=$(readlink /proc/1/exe) || { echo "E pid1_unreadable"; exit 3; }
case "$pgexe" in */postgres) ;; *) echo "E pid1_not_postgres"; exit 3;; esac
me=$$; seen=" "; round=0
while [ "$round" -lt "$ROUNDS" ]; do
  round=$((round + 1)); new=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = 1 ] && continue
    [ "$p" = "$me" ] && continue
    case "$seen" in *" $p "*) continue;; esac
    st=$(cat "$d/stat" 2>/dev/null) || continue
    rest=${st##*) }
    set -- $rest
    [ "$1" = Z ] && continue
    [ "$2" = "$me" ] && continue
    exe=$(readlink "$d/exe" 2>/dev/null) || continue
    if [ "$2" = 1 ] && [ "$exe" = "$pgexe" ]; then
      [ "$mode" = strays ] && continue
      case "$allowed" in *" $p "*) continue;; esac
    fi
    if kill -STOP "$p" 2>/dev/null; then seen="$seen$p "; new=1; echo "P $p $2 $exe"; fi
  done
  [ "$new" = 0 ] && break
done
for p in $seen; do kill -KILL "$p" 2>/dev/null; done
echo "R $round"
"""

# The built-in rows of the catalogs that decide what a query means, one digest per catalog over
# its rows in oid order (a rewrite of md5's own row changes pg_proc's digest too).
BUILTIN_SQL = {
    "pg_proc": "SELECT oid, proname, pronamespace, prolang, prosrc, probin, prorettype, proargtypes, prosecdef, "
    "proconfig, prokind, provolatile, prosupport, proisstrict FROM pg_catalog.pg_proc",
    "pg_operator": "SELECT oid, oprname, oprnamespace, oprleft, oprright, oprresult, oprcode, oprnegate, oprcom "
    "FROM pg_catalog.pg_operator",
    "pg_cast": "SELECT oid, castsource, casttarget, castfunc, castcontext, castmethod FROM pg_catalog.pg_cast",
    "pg_type": "SELECT oid, typname, typnamespace, typinput, typoutput, typreceive, typsend, typbasetype "
    "FROM pg_catalog.pg_type",
    "pg_aggregate": "SELECT aggfnoid::pg_catalog.oid AS oid, aggtransfn, aggfinalfn, aggcombinefn, agginitval "
    "FROM pg_catalog.pg_aggregate",
    "pg_amop": "SELECT oid, amopfamily, amoplefttype, amoprighttype, amopstrategy, amopopr FROM pg_catalog.pg_amop",
    "pg_amproc": "SELECT oid, amprocfamily, amproclefttype, amprocrighttype, amprocnum, amproc FROM pg_catalog.pg_amproc",
    "pg_namespace": "SELECT oid, nspname FROM pg_catalog.pg_namespace",
    "pg_language": "SELECT oid, lanname, lanplcallfoid, laninline, lanvalidator FROM pg_catalog.pg_language",
    "pg_collation": "SELECT oid, collname, collnamespace, collprovider, collcollate, collctype FROM pg_catalog.pg_collation",
}
BUILTIN_DUMP_SQL = "\n".join(
    "SELECT '%s=' || pg_catalog.md5(COALESCE(pg_catalog.string_agg(t::pg_catalog.text, E'\\n' "
    "ORDER BY t.oid), '')) FROM (%s) t WHERE t.oid < %d;" % (name, sql, FIRST_USER_OID)
    for name, sql in sorted(BUILTIN_SQL.items())
)

# Every object the server did not ship that can change what a query means ("code"), and what
# else the catalog holds ("data": relations, schemas, roles), as kind:identity -> definition.
_USER_NSP = (
    "n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') "
    "AND n.nspname NOT LIKE 'pg\\_temp\\_%' AND n.nspname NOT LIKE 'pg\\_toast\\_temp\\_%'"
)
OBJECTS_SQL = """
SELECT pg_catalog.json_object_agg(k, v) FROM (
 SELECT 'function:' || n.nspname || '.' || p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')',
        pg_catalog.concat_ws('|', p.prokind, l.lanname, pg_catalog.md5(COALESCE(p.prosrc, '') || '|' ||
        COALESCE(p.probin, '') || '|' || COALESCE(p.proconfig::pg_catalog.text, '')), p.prosecdef::pg_catalog.text)
   FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
   JOIN pg_catalog.pg_language l ON l.oid = p.prolang WHERE p.oid >= %(first)d
 UNION ALL
 SELECT 'operator:' || n.nspname || '.' || o.oprname || '(' || o.oprleft::pg_catalog.regtype::pg_catalog.text || ','
        || o.oprright::pg_catalog.regtype::pg_catalog.text || ')', o.oprcode::pg_catalog.text
   FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace WHERE o.oid >= %(first)d
 UNION ALL
 SELECT 'cast:' || c.castsource::pg_catalog.regtype::pg_catalog.text || '->' || c.casttarget::pg_catalog.regtype::pg_catalog.text,
        pg_catalog.concat_ws('|', c.castfunc::pg_catalog.regproc::pg_catalog.text, c.castcontext, c.castmethod)
   FROM pg_catalog.pg_cast c WHERE c.oid >= %(first)d
 UNION ALL
 SELECT 'rule:' || n.nspname || '.' || cl.relname || '.' || r.rulename,
        pg_catalog.concat_ws('|', r.ev_enabled, pg_catalog.md5(pg_catalog.pg_get_ruledef(r.oid)))
   FROM pg_catalog.pg_rewrite r JOIN pg_catalog.pg_class cl ON cl.oid = r.ev_class
   JOIN pg_catalog.pg_namespace n ON n.oid = cl.relnamespace WHERE r.oid >= %(first)d
 UNION ALL
 SELECT 'trigger:' || n.nspname || '.' || cl.relname || '.' || t.tgname,
        pg_catalog.concat_ws('|', t.tgenabled, pg_catalog.md5(pg_catalog.pg_get_triggerdef(t.oid)))
   FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class cl ON cl.oid = t.tgrelid
   JOIN pg_catalog.pg_namespace n ON n.oid = cl.relnamespace WHERE NOT t.tgisinternal
 UNION ALL
 SELECT 'event_trigger:' || e.evtname, pg_catalog.concat_ws('|', e.evtevent, e.evtfoid::pg_catalog.regproc::pg_catalog.text, e.evtenabled)
   FROM pg_catalog.pg_event_trigger e
 UNION ALL
 SELECT 'policy:' || n.nspname || '.' || cl.relname || '.' || pol.polname,
        pg_catalog.md5(pg_catalog.concat_ws('|', pol.polcmd, pol.polpermissive::pg_catalog.text, pol.polroles::pg_catalog.text,
        pg_catalog.pg_get_expr(pol.polqual, pol.polrelid), pg_catalog.pg_get_expr(pol.polwithcheck, pol.polrelid)))
   FROM pg_catalog.pg_policy pol JOIN pg_catalog.pg_class cl ON cl.oid = pol.polrelid
   JOIN pg_catalog.pg_namespace n ON n.oid = cl.relnamespace
 UNION ALL
 SELECT 'extension:' || x.extname, x.extversion FROM pg_catalog.pg_extension x WHERE x.oid >= %(first)d
 UNION ALL
 SELECT 'language:' || l.lanname, l.lanplcallfoid::pg_catalog.text FROM pg_catalog.pg_language l WHERE l.oid >= %(first)d
 UNION ALL
 SELECT 'relation:' || n.nspname || '.' || cl.relname,
        pg_catalog.concat_ws('|', cl.relkind, cl.relrowsecurity::pg_catalog.text, cl.relforcerowsecurity::pg_catalog.text)
   FROM pg_catalog.pg_class cl JOIN pg_catalog.pg_namespace n ON n.oid = cl.relnamespace
  WHERE cl.relkind IN ('r', 'v', 'm', 'f', 'p') AND %(user_nsp)s
 UNION ALL
 SELECT 'schema:' || n.nspname, pg_catalog.pg_get_userbyid(n.nspowner)::pg_catalog.text
   FROM pg_catalog.pg_namespace n WHERE n.oid >= %(first)d AND %(user_nsp)s
 UNION ALL
 SELECT 'role:' || r.rolname, pg_catalog.concat_ws('|', r.rolsuper, r.rolinherit, r.rolcanlogin, r.rolbypassrls)
   FROM pg_catalog.pg_roles r
 UNION ALL
 SELECT 'database:' || d.datname, d.oid::pg_catalog.text FROM pg_catalog.pg_database d
) o(k, v);
""" % {"first": FIRST_USER_OID, "user_nsp": _USER_NSP}

# Settings a session starts with that the agent could have changed: role/database-level rows
# (restored from the baseline, kept verbatim for that), ALTER SYSTEM's file, the server's other
# configuration (postgresql.conf is writable by the server's own user), and pg_hba's rules.
SETTINGS_SQL = """
SELECT pg_catalog.json_build_object(
 'db_role', (SELECT COALESCE(pg_catalog.json_agg(pg_catalog.json_build_object('db', s.setdatabase::pg_catalog.text,
    'role', s.setrole::pg_catalog.text, 'config', s.setconfig) ORDER BY s.setdatabase, s.setrole), '[]')
    FROM pg_catalog.pg_db_role_setting s),
 'named', (SELECT pg_catalog.json_object_agg(k, v) FROM (
    SELECT 'db_role:' || COALESCE(d.datname, '*') || '/' || COALESCE(r.rolname, '*') AS k,
           s.setconfig::pg_catalog.text AS v
      FROM pg_catalog.pg_db_role_setting s LEFT JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase
      LEFT JOIN pg_catalog.pg_roles r ON r.oid = s.setrole
    UNION ALL
    SELECT 'system:' || f.name || '@' || f.seqno::pg_catalog.text, pg_catalog.concat_ws('|', f.setting, f.applied::pg_catalog.text)
      FROM pg_catalog.pg_file_settings f WHERE f.sourcefile LIKE '%%postgresql.auto.conf'
    UNION ALL
    SELECT 'server:' || g.name, g.setting FROM pg_catalog.pg_settings g
     WHERE g.source NOT IN ('default', 'client', 'session', 'override', 'database', 'user', 'database user')
    UNION ALL
    SELECT 'hba:' || h.line_number::pg_catalog.text,
           pg_catalog.concat_ws('|', h.type, h.database::pg_catalog.text, h.user_name::pg_catalog.text, h.address, h.auth_method)
      FROM pg_catalog.pg_hba_file_rules h) x)
);
"""

TABLES_SQL = """
SELECT COALESCE(pg_catalog.json_agg(pg_catalog.json_build_array(n.nspname, cl.relname,
  (SELECT pg_catalog.md5(pg_catalog.string_agg(pg_catalog.concat_ws(':', a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod),
      a.attnotnull::pg_catalog.text, a.attgenerated), ',' ORDER BY a.attnum))
     FROM pg_catalog.pg_attribute a WHERE a.attrelid = cl.oid AND a.attnum > 0 AND NOT a.attisdropped),
  NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type ty ON ty.oid = a.atttypid
     LEFT JOIN pg_catalog.pg_type el ON el.oid = ty.typelem AND ty.typcategory = 'A'
     WHERE a.attrelid = cl.oid AND a.attnum > 0 AND NOT a.attisdropped
       AND (ty.typoutput >= %(first)d OR ty.typtype = 'c' OR el.typoutput >= %(first)d OR el.typtype = 'c')),
  (SELECT pg_catalog.array_agg(a.attname ORDER BY k.ord) FROM pg_catalog.pg_index i
     CROSS JOIN LATERAL pg_catalog.unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
     JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = cl.oid AND i.indisprimary)
  ) ORDER BY n.nspname, cl.relname), '[]')
 FROM pg_catalog.pg_class cl JOIN pg_catalog.pg_namespace n ON n.oid = cl.relnamespace
 WHERE cl.relkind = 'r' AND %(user_nsp)s;
""" % {"first": FIRST_USER_OID, "user_nsp": _USER_NSP}


def quote_ident(name):
    """A PostgreSQL identifier, quoted (a NUL cannot be in one; the server refuses it anyway)."""
    return '"' + str(name).replace('"', '""') + '"'


def table_sql(schema, name, key):
    """One statement: a table's count, content digest and (up to ROW_BOUND rows) row digests."""
    rel = quote_ident(schema) + "." + quote_ident(name)
    if key:
        keyexpr = (
            "pg_catalog.left(pg_catalog.md5(ROW("
            + ", ".join("x." + quote_ident(k) for k in key)
            + ")::pg_catalog.text), %d)" % ROW_HASH_CHARS
        )
        rows = "pg_catalog.json_object_agg(pk, h)"
    else:
        keyexpr, rows = "NULL::pg_catalog.text", 'pg_catalog.json_agg(h ORDER BY h COLLATE pg_catalog."C")'
    return (
        "SELECT pg_catalog.json_build_object('n', pg_catalog.count(*), 'd', pg_catalog.md5(COALESCE("
        "pg_catalog.string_agg(h, '' ORDER BY h COLLATE pg_catalog.\"C\"), '')), 'rows', CASE WHEN "
        "pg_catalog.count(*) <= %d THEN %s END) FROM (SELECT pg_catalog.left(pg_catalog.md5(x::pg_catalog.text), %d) AS h, "
        "%s AS pk FROM ONLY %s x) q;" % (ROW_BOUND, rows, ROW_HASH_CHARS, keyexpr, rel)
    )


def count_sql(schema, name):
    """A table whose rows we do not print: its count alone (count(*) runs no type's code)."""
    return "SELECT pg_catalog.json_build_object('n', pg_catalog.count(*)) FROM ONLY %s.%s;" % (
        quote_ident(schema),
        quote_ident(name),
    )


RESTORE_SQL = """
SELECT pg_catalog.count(*) FROM (SELECT pg_catalog.pg_terminate_backend(a.pid, 5000) FROM pg_catalog.pg_stat_activity a
 WHERE a.pid <> pg_catalog.pg_backend_pid() AND a.backend_type NOT IN (%(aux)s)) t;
BEGIN;
DELETE FROM pg_catalog.pg_db_role_setting;
INSERT INTO pg_catalog.pg_db_role_setting (setdatabase, setrole, setconfig)
 SELECT (e->>'db')::pg_catalog.oid, (e->>'role')::pg_catalog.oid,
        ARRAY(SELECT pg_catalog.json_array_elements_text(e->'config'))
   FROM pg_catalog.json_array_elements(:'baseline'::pg_catalog.json) e;
COMMIT;
ALTER SYSTEM RESET ALL;
SELECT pg_catalog.pg_reload_conf();
SELECT COALESCE(pg_catalog.string_agg(a.pid::pg_catalog.text, ' '), '') FROM pg_catalog.pg_stat_activity a
 WHERE a.pid <> pg_catalog.pg_backend_pid() AND a.backend_type IN (%(aux)s);
""" % {"aux": ", ".join("'%s'" % name for name in AUX_BACKENDS)}
