-- Read-only SQL an ops agent runs against production PostgreSQL: activity and locks, sizes,
-- vacuum and bloat, replication and WAL, configuration, information_schema and pg_catalog
-- introspection, and application queries (joins, CTEs, window functions, casts, JSON, string
-- literals containing \ and ;, dollar quoting, comments).
--
-- Format: one query per record. Records are separated by a line containing exactly
-- `-- ----` (nothing else, no trailing spaces). Everything before the first separator (this
-- header) is documentation and is not a record. A record is used as is, including its
-- comments and an optional trailing `;`.
--
-- Application tables (users, orders, order_items, events, jobs, studies) are created by
-- tests/sql.rs (APP_SCHEMA) so every query also runs against a real PostgreSQL 15 cluster.
-- A few records are realistic queries the validator refuses on purpose (a denied function);
-- the acceptance test reports them.
-- ----
SELECT pid, usename, application_name, client_addr, state, wait_event_type, wait_event,
       now() - query_start AS running_for, left(query, 200) AS query
FROM pg_stat_activity
WHERE state <> 'idle' AND pid <> pg_backend_pid()
ORDER BY query_start
-- ----
SELECT state, count(*) FROM pg_stat_activity GROUP BY state ORDER BY 2 DESC;
-- ----
SELECT datname, usename, count(*) AS connections
FROM pg_stat_activity
GROUP BY ROLLUP (datname, usename)
ORDER BY datname NULLS FIRST, usename NULLS FIRST
-- ----
-- long-running transactions
SELECT pid, usename, xact_start, now() - xact_start AS xact_age, state
FROM pg_stat_activity
WHERE xact_start IS NOT NULL AND now() - xact_start > interval '5 minutes'
ORDER BY xact_age DESC
-- ----
SELECT pid, now() - state_change AS idle_for, usename, application_name
FROM pg_stat_activity
WHERE state = 'idle in transaction'
ORDER BY idle_for DESC
-- ----
SELECT blocked.pid AS blocked_pid, blocked.usename AS blocked_user,
       blocking.pid AS blocking_pid, blocking.usename AS blocking_user,
       left(blocked.query, 120) AS blocked_query, left(blocking.query, 120) AS blocking_query
FROM pg_stat_activity AS blocked
JOIN LATERAL unnest(pg_blocking_pids(blocked.pid)) AS b(pid) ON true
JOIN pg_stat_activity AS blocking ON blocking.pid = b.pid
-- ----
SELECT l.locktype, l.mode, l.granted, l.relation::regclass AS relation, a.pid, a.usename, a.state
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.relation IS NOT NULL
ORDER BY l.granted, a.pid
-- ----
SELECT mode, granted, count(*) FROM pg_locks GROUP BY mode, granted ORDER BY 3 DESC
-- ----
SELECT wait_event_type, wait_event, count(*)
FROM pg_stat_activity
WHERE wait_event IS NOT NULL
GROUP BY 1, 2
ORDER BY 3 DESC
LIMIT 20
-- ----
SELECT setting::int AS max_connections,
       (SELECT count(*) FROM pg_stat_activity) AS used,
       round(100.0 * (SELECT count(*) FROM pg_stat_activity) / setting::int, 1) AS pct
FROM pg_settings WHERE name = 'max_connections'
-- ----
SELECT datname, pg_size_pretty(pg_database_size(datname)) AS size
FROM pg_database
WHERE NOT datistemplate
ORDER BY pg_database_size(datname) DESC
-- ----
SELECT pg_size_pretty(pg_database_size(current_database())) AS db_size
-- ----
SELECT n.nspname AS schema, c.relname AS table,
       pg_size_pretty(pg_total_relation_size(c.oid)) AS total,
       pg_size_pretty(pg_relation_size(c.oid)) AS heap,
       pg_size_pretty(pg_indexes_size(c.oid)) AS indexes
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'm')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
ORDER BY pg_total_relation_size(c.oid) DESC
LIMIT 20
-- ----
SELECT relname, reltuples::bigint AS estimated_rows, relpages
FROM pg_class
WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace
ORDER BY reltuples DESC
-- ----
SELECT indexrelid::regclass AS index, relid::regclass AS table,
       pg_size_pretty(pg_relation_size(indexrelid)) AS size, idx_scan
FROM pg_stat_user_indexes
WHERE idx_scan = 0
ORDER BY pg_relation_size(indexrelid) DESC
-- ----
SELECT schemaname, relname, seq_scan, seq_tup_read, idx_scan,
       CASE WHEN seq_scan + coalesce(idx_scan, 0) = 0 THEN NULL
            ELSE round(100.0 * coalesce(idx_scan, 0) / (seq_scan + coalesce(idx_scan, 0)), 1) END AS idx_pct
FROM pg_stat_user_tables
ORDER BY seq_tup_read DESC
LIMIT 15
-- ----
SELECT relname, n_live_tup, n_dead_tup,
       round(n_dead_tup::numeric / nullif(n_live_tup + n_dead_tup, 0) * 100, 2) AS dead_pct,
       last_vacuum, last_autovacuum, last_analyze, last_autoanalyze
FROM pg_stat_user_tables
ORDER BY n_dead_tup DESC
LIMIT 20
-- ----
SELECT relname, autovacuum_count, vacuum_count, analyze_count, autoanalyze_count
FROM pg_stat_user_tables
ORDER BY autovacuum_count DESC
-- ----
SELECT datname, age(datfrozenxid) AS xid_age,
       round(100.0 * age(datfrozenxid) / 2147483647, 2) AS pct_to_wraparound
FROM pg_database
ORDER BY xid_age DESC
-- ----
SELECT c.oid::regclass AS table, age(c.relfrozenxid) AS xid_age,
       pg_size_pretty(pg_total_relation_size(c.oid)) AS size
FROM pg_class c
WHERE c.relkind IN ('r', 'm', 't')
ORDER BY age(c.relfrozenxid) DESC
LIMIT 10
-- ----
SELECT pid, datname, relid::regclass AS table, phase, heap_blks_total, heap_blks_scanned,
       round(100.0 * heap_blks_scanned / nullif(heap_blks_total, 0), 1) AS pct
FROM pg_stat_progress_vacuum
-- ----
SELECT pid, datname, relid::regclass, index_relid::regclass, command, phase,
       blocks_done, blocks_total
FROM pg_stat_progress_create_index
-- ----
SELECT relname, heap_blks_read, heap_blks_hit,
       round(heap_blks_hit::numeric / nullif(heap_blks_hit + heap_blks_read, 0), 4) AS hit_ratio
FROM pg_statio_user_tables
ORDER BY heap_blks_read DESC
LIMIT 10
-- ----
SELECT datname, blks_hit, blks_read,
       round(blks_hit * 100.0 / nullif(blks_hit + blks_read, 0), 2) AS cache_hit_pct,
       xact_commit, xact_rollback, deadlocks, temp_files, pg_size_pretty(temp_bytes) AS temp
FROM pg_stat_database
WHERE datname IS NOT NULL
-- ----
SELECT checkpoints_timed, checkpoints_req, buffers_checkpoint, buffers_clean,
       buffers_backend, maxwritten_clean, stats_reset
FROM pg_stat_bgwriter
-- ----
SELECT archived_count, last_archived_wal, last_archived_time, failed_count,
       last_failed_wal, last_failed_time
FROM pg_stat_archiver
-- ----
SELECT wal_records, wal_fpi, pg_size_pretty(wal_bytes) AS wal_bytes, wal_buffers_full, stats_reset
FROM pg_stat_wal
-- ----
SELECT pg_current_wal_lsn(), pg_walfile_name(pg_current_wal_lsn()), pg_is_in_recovery()
-- ----
SELECT client_addr, application_name, state, sync_state,
       pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) AS replay_lag_bytes,
       write_lag, flush_lag, replay_lag
FROM pg_stat_replication
-- ----
SELECT slot_name, plugin, slot_type, active, wal_status,
       pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)) AS retained
FROM pg_replication_slots
ORDER BY pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) DESC NULLS LAST
-- ----
SELECT status, receive_start_lsn, written_lsn, flushed_lsn, latest_end_time, sender_host
FROM pg_stat_wal_receiver
-- ----
SELECT CASE WHEN pg_is_in_recovery() THEN now() - pg_last_xact_replay_timestamp() END AS replica_delay
-- ----
-- WAL directory size (refused: pg_ls_waldir is on the denylist)
SELECT count(*) AS segments, pg_size_pretty(sum(size)) AS total FROM pg_ls_waldir()
-- ----
SELECT name, setting, unit, source, boot_val, reset_val
FROM pg_settings
WHERE name IN ('shared_buffers', 'work_mem', 'maintenance_work_mem', 'effective_cache_size',
               'max_wal_size', 'checkpoint_timeout', 'random_page_cost')
ORDER BY name
-- ----
SELECT name, setting, source, sourcefile, sourceline
FROM pg_settings
WHERE source NOT IN ('default', 'override')
ORDER BY name
-- ----
SELECT name, setting, pending_restart FROM pg_settings WHERE pending_restart
-- ----
SELECT current_setting('server_version') AS version, current_setting('TimeZone') AS tz,
       current_setting('statement_timeout') AS statement_timeout
-- ----
SELECT version()
-- ----
SELECT pg_postmaster_start_time(), now() - pg_postmaster_start_time() AS uptime
-- ----
SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolcanlogin, rolreplication, rolconnlimit, rolvaliduntil
FROM pg_roles
WHERE rolname !~ '^pg_'
ORDER BY rolname
-- ----
SELECT r.rolname AS role, m.rolname AS member_of
FROM pg_auth_members am
JOIN pg_roles r ON r.oid = am.member
JOIN pg_roles m ON m.oid = am.roleid
ORDER BY 1, 2
-- ----
SELECT grantee, table_schema, table_name, string_agg(privilege_type, ', ' ORDER BY privilege_type) AS privileges
FROM information_schema.role_table_grants
WHERE table_schema = 'public'
GROUP BY grantee, table_schema, table_name
ORDER BY table_name, grantee
-- ----
SELECT extname, extversion, n.nspname AS schema
FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
ORDER BY extname
-- ----
SELECT name, default_version, installed_version
FROM pg_available_extensions
WHERE installed_version IS NOT NULL OR name IN ('pg_stat_statements', 'pgcrypto')
ORDER BY name
-- ----
SELECT table_schema, table_name, table_type
FROM information_schema.tables
WHERE table_schema NOT IN ('pg_catalog', 'information_schema')
ORDER BY table_schema, table_name
-- ----
SELECT column_name, data_type, character_maximum_length, is_nullable, column_default
FROM information_schema.columns
WHERE table_schema = 'public' AND table_name = 'orders'
ORDER BY ordinal_position
-- ----
SELECT table_name, column_name
FROM information_schema.columns
WHERE table_schema = 'public' AND column_name ILIKE '%email%'
-- ----
SELECT tc.table_name, tc.constraint_name, tc.constraint_type, kcu.column_name
FROM information_schema.table_constraints tc
JOIN information_schema.key_column_usage kcu
  ON kcu.constraint_name = tc.constraint_name AND kcu.table_schema = tc.table_schema
WHERE tc.table_schema = 'public'
ORDER BY tc.table_name, tc.constraint_type
-- ----
SELECT rc.constraint_name, kcu.table_name AS child_table, kcu.column_name AS child_column,
       ccu.table_name AS parent_table, ccu.column_name AS parent_column, rc.delete_rule
FROM information_schema.referential_constraints rc
JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = rc.constraint_name
JOIN information_schema.constraint_column_usage ccu ON ccu.constraint_name = rc.unique_constraint_name
WHERE kcu.table_schema = 'public'
-- ----
SELECT table_name, view_definition
FROM information_schema.views
WHERE table_schema = 'public'
-- ----
SELECT routine_schema, routine_name, routine_type, data_type
FROM information_schema.routines
WHERE routine_schema NOT IN ('pg_catalog', 'information_schema')
ORDER BY 1, 2
-- ----
SELECT schema_name, schema_owner FROM information_schema.schemata ORDER BY 1
-- ----
SELECT sequence_schema, sequence_name, data_type, start_value, increment
FROM information_schema.sequences
-- ----
SELECT schemaname, sequencename, last_value, max_value,
       round(100.0 * last_value / max_value, 4) AS pct_used
FROM pg_sequences
ORDER BY pct_used DESC NULLS LAST
-- ----
SELECT indexrelid::regclass AS index, indrelid::regclass AS table,
       indisunique, indisprimary, indisvalid, pg_get_indexdef(indexrelid) AS definition
FROM pg_index
WHERE indrelid = 'public.orders'::regclass
-- ----
SELECT indexrelid::regclass AS invalid_index FROM pg_index WHERE NOT indisvalid
-- ----
-- duplicate indexes (same table, same columns)
SELECT indrelid::regclass AS table, array_agg(indexrelid::regclass) AS indexes
FROM pg_index
GROUP BY indrelid, indkey::text, indclass::text, coalesce(indexprs::text, ''), coalesce(indpred::text, '')
HAVING count(*) > 1
-- ----
SELECT conname, contype, conrelid::regclass AS table, pg_get_constraintdef(oid) AS definition
FROM pg_constraint
WHERE connamespace = 'public'::regnamespace
ORDER BY conrelid::regclass::text, conname
-- ----
-- foreign keys without an index on the referencing column
SELECT c.conrelid::regclass AS table, c.conname, a.attname
FROM pg_constraint c
JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
WHERE c.contype = 'f'
  AND NOT EXISTS (
    SELECT 1 FROM pg_index i
    WHERE i.indrelid = c.conrelid AND i.indkey[0] = c.conkey[1]
  )
-- ----
SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull, a.attnum
FROM pg_attribute a
WHERE a.attrelid = 'public.users'::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
-- ----
SELECT n.nspname, p.proname, pg_get_function_identity_arguments(p.oid) AS args,
       l.lanname, p.provolatile, p.prosecdef
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
ORDER BY 1, 2
-- ----
SELECT tgname, tgrelid::regclass AS table, tgenabled, pg_get_triggerdef(oid) AS definition
FROM pg_trigger
WHERE NOT tgisinternal
-- ----
SELECT inhparent::regclass AS parent, inhrelid::regclass AS partition,
       pg_get_expr(c.relpartbound, c.oid) AS bounds
FROM pg_inherits
JOIN pg_class c ON c.oid = inhrelid
ORDER BY 1, 2
-- ----
SELECT attname, null_frac, n_distinct, avg_width, most_common_vals::text
FROM pg_stats
WHERE schemaname = 'public' AND tablename = 'orders'
-- ----
SELECT c.relname, c.relkind, c.relpersistence, c.reloptions
FROM pg_class c
WHERE c.reloptions IS NOT NULL
-- ----
SELECT d.classid::regclass, d.objid, d.refobjid::regclass, d.deptype
FROM pg_depend d
WHERE d.refobjid = 'public.users'::regclass
LIMIT 50
-- ----
SELECT viewname, definition FROM pg_views WHERE schemaname = 'public'
-- ----
SELECT matviewname, ispopulated, pg_size_pretty(pg_total_relation_size(format('%I.%I', schemaname, matviewname)::regclass)) AS size
FROM pg_matviews
-- ----
SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1, 2
-- ----
SELECT nspname FROM pg_namespace WHERE nspname !~ '^pg_' AND nspname <> 'information_schema'
-- ----
SELECT * FROM pg_stat_user_functions ORDER BY total_time DESC LIMIT 10
-- ----
SELECT slru.name, slru.blks_hit, slru.blks_read FROM pg_stat_slru AS slru
-- ----
SELECT gss_authenticated, encrypted, count(*) FROM pg_stat_gssapi GROUP BY 1, 2
-- ----
SELECT s.pid, s.ssl, s.version, s.cipher FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
-- ----
SELECT name, total_bytes, used_bytes FROM pg_backend_memory_contexts ORDER BY total_bytes DESC LIMIT 5
-- ----
EXPLAIN SELECT * FROM orders WHERE user_id = 42
-- ----
EXPLAIN (COSTS OFF) SELECT o.id FROM orders o JOIN users u ON u.id = o.user_id WHERE u.country = 'DE'
-- ----
EXPLAIN (FORMAT JSON, VERBOSE) SELECT count(*) FROM events WHERE kind = 'login'
-- ----
SELECT count(*) FROM users
-- ----
SELECT status, count(*) FROM users GROUP BY status ORDER BY count(*) DESC
-- ----
SELECT date_trunc('day', created_at) AS day, count(*) AS signups
FROM users
WHERE created_at >= now() - interval '30 days'
GROUP BY 1
ORDER BY 1
-- ----
SELECT u.id, u.email, count(o.id) AS orders, coalesce(sum(o.total), 0) AS revenue
FROM users u
LEFT JOIN orders o ON o.user_id = u.id AND o.status = 'paid'
GROUP BY u.id, u.email
ORDER BY revenue DESC
LIMIT 10
-- ----
SELECT o.id, o.status, o.total, u.email
FROM orders o
JOIN users u ON u.id = o.user_id
WHERE o.status = 'failed' AND o.created_at > now() - interval '1 hour'
ORDER BY o.created_at DESC
-- ----
WITH daily AS (
  SELECT created_at::date AS day, sum(total) AS revenue
  FROM orders
  WHERE status = 'paid'
  GROUP BY 1
)
SELECT day, revenue,
       avg(revenue) OVER (ORDER BY day ROWS BETWEEN 6 PRECEDING AND CURRENT ROW) AS revenue_7d_avg
FROM daily
ORDER BY day DESC
LIMIT 14
-- ----
SELECT user_id, id, total,
       row_number() OVER (PARTITION BY user_id ORDER BY created_at DESC) AS rn
FROM orders
ORDER BY user_id, rn
LIMIT 50
-- ----
SELECT DISTINCT ON (user_id) user_id, id AS last_order_id, created_at
FROM orders
ORDER BY user_id, created_at DESC
-- ----
SELECT id, total, total - lag(total) OVER (ORDER BY created_at) AS delta,
       rank() OVER (ORDER BY total DESC) AS rank_by_total,
       sum(total) OVER () AS grand_total
FROM orders
WHERE user_id = 1
-- ----
SELECT status,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY total) AS median,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY total) AS p95
FROM orders
GROUP BY status
-- ----
SELECT count(*) FILTER (WHERE status = 'paid') AS paid,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'refunded') AS refunded
FROM orders
WHERE created_at >= date_trunc('month', now())
-- ----
SELECT country, status, count(*)
FROM users
GROUP BY GROUPING SETS ((country, status), (country), ())
ORDER BY country NULLS LAST, status NULLS LAST
-- ----
SELECT u.id, u.email
FROM users u
WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.user_id = u.id)
  AND u.created_at < now() - interval '7 days'
-- ----
SELECT id, email FROM users WHERE id IN (SELECT user_id FROM orders WHERE total > 1000)
-- ----
SELECT u.email, recent.id, recent.total
FROM users u
CROSS JOIN LATERAL (
  SELECT o.id, o.total FROM orders o WHERE o.user_id = u.id ORDER BY o.created_at DESC LIMIT 3
) AS recent
WHERE u.country = 'DE'
-- ----
WITH RECURSIVE days(d) AS (
  SELECT date_trunc('day', now())::date - 6
  UNION ALL
  SELECT d + 1 FROM days WHERE d < date_trunc('day', now())::date
)
SELECT days.d, count(o.id)
FROM days
LEFT JOIN orders o ON o.created_at::date = days.d
GROUP BY days.d
ORDER BY days.d
-- ----
SELECT g.hour, count(e.id)
FROM generate_series(date_trunc('hour', now()) - interval '23 hours', date_trunc('hour', now()), interval '1 hour') AS g(hour)
LEFT JOIN events e ON date_trunc('hour', e.created_at) = g.hour
GROUP BY g.hour
ORDER BY g.hour
-- ----
SELECT kind, count(*), min(created_at), max(created_at)
FROM events
WHERE created_at > now() - interval '24 hours'
GROUP BY kind
ORDER BY 2 DESC
-- ----
SELECT payload->>'ip' AS ip, count(*)
FROM events
WHERE kind = 'login_failed' AND payload ? 'ip'
GROUP BY 1
HAVING count(*) > 5
ORDER BY 2 DESC
-- ----
SELECT id, payload #>> '{device,os}' AS os, jsonb_pretty(payload) AS payload
FROM events
WHERE payload @> '{"kind": "crash"}'::jsonb
LIMIT 5
-- ----
SELECT id, jsonb_array_length(payload->'items') AS n_items
FROM events
WHERE jsonb_typeof(payload->'items') = 'array'
ORDER BY n_items DESC
LIMIT 10
-- ----
SELECT e.id, item->>'sku' AS sku, (item->>'qty')::int AS qty
FROM events e, jsonb_array_elements(e.payload->'items') AS item
WHERE e.kind = 'cart'
LIMIT 20
-- ----
SELECT queue, state, count(*), max(attempts) AS max_attempts
FROM jobs
GROUP BY queue, state
ORDER BY queue, state
-- ----
SELECT id, queue, attempts, run_at, left(last_error, 200) AS last_error
FROM jobs
WHERE state = 'failed'
ORDER BY run_at DESC NULLS LAST
LIMIT 20
-- ----
SELECT queue, count(*) AS stuck, min(run_at) AS oldest
FROM jobs
WHERE state = 'running' AND run_at < now() - interval '15 minutes'
GROUP BY queue
-- ----
SELECT last_error, count(*)
FROM jobs
WHERE last_error ~ 'timeout|deadlock'
GROUP BY last_error
ORDER BY 2 DESC
-- ----
-- error messages that contain Windows paths and semicolons
SELECT id, last_error
FROM jobs
WHERE last_error LIKE '%C:\Program Files\%' OR last_error LIKE '%;%'
-- ----
SELECT id, regexp_replace(last_error, E'\\s+', ' ', 'g') AS compact_error
FROM jobs
WHERE last_error IS NOT NULL
LIMIT 10
-- ----
SELECT split_part(email, '@', 2) AS domain, count(*)
FROM users
GROUP BY 1
ORDER BY 2 DESC
LIMIT 10
-- ----
SELECT id, email FROM users WHERE email ILIKE '%\_test%' ESCAPE '\'
-- ----
SELECT id, email FROM users WHERE lower(email) = lower('Alice@Example.com')
-- ----
SELECT id, name FROM users WHERE name ~* E'^o\'brien' OR name = 'O''Brien'
-- ----
SELECT $$It's a "quoted" string with ; and \ inside$$ AS note, $tag$SELECT 1; -- not a comment$tag$ AS text
-- ----
SELECT string_agg(DISTINCT country, '; ' ORDER BY country) AS countries FROM users
-- ----
SELECT id, created_at AT TIME ZONE 'Europe/Moscow' AS local_time FROM orders ORDER BY id DESC LIMIT 5
-- ----
SELECT extract(epoch FROM (paid_at - created_at))::int AS seconds_to_pay, count(*)
FROM orders
WHERE paid_at IS NOT NULL
GROUP BY 1
ORDER BY 1
-- ----
SELECT CAST(total AS integer) AS whole, total::text AS as_text, to_char(total, 'FM999G999D00') AS formatted
FROM orders
LIMIT 5
-- ----
SELECT to_char(created_at, 'YYYY-MM') AS month, currency, sum(total)::numeric(14,2) AS total
FROM orders
WHERE status = 'paid'
GROUP BY 1, 2
ORDER BY 1 DESC, 2
-- ----
SELECT oi.sku, sum(oi.qty) AS units, sum(oi.qty * oi.unit_price) AS revenue
FROM order_items oi
JOIN orders o ON o.id = oi.order_id
WHERE o.status = 'paid'
GROUP BY oi.sku
ORDER BY revenue DESC
LIMIT 10
-- ----
SELECT o.id, o.total, sum(oi.qty * oi.unit_price) AS items_total
FROM orders o
JOIN order_items oi ON oi.order_id = o.id
GROUP BY o.id, o.total
HAVING o.total <> sum(oi.qty * oi.unit_price)
-- ----
SELECT id FROM orders WHERE status = 'paid'
EXCEPT
SELECT order_id FROM order_items
-- ----
SELECT 'users' AS table_name, count(*) FROM users
UNION ALL
SELECT 'orders', count(*) FROM orders
UNION ALL
SELECT 'events', count(*) FROM events
-- ----
SELECT * FROM (VALUES ('paid', 1), ('failed', 2), ('refunded', 3)) AS s(status, sort_order) ORDER BY sort_order
-- ----
VALUES (now(), current_user, current_database())
-- ----
TABLE jobs LIMIT 5
-- ----
SELECT modality, count(*) AS studies,
       percentile_disc(0.9) WITHIN GROUP (ORDER BY processed_at - received_at) AS p90_processing
FROM studies
WHERE received_at > now() - interval '7 days'
GROUP BY modality
-- ----
SELECT clinic_id, count(*) FILTER (WHERE status = 'error') AS errors, count(*) AS total
FROM studies
GROUP BY clinic_id
HAVING count(*) FILTER (WHERE status = 'error') > 0
ORDER BY errors DESC
-- ----
SELECT id, clinic_id, status, received_at
FROM studies
WHERE processed_at IS NULL AND received_at < now() - '2 hours'::interval
ORDER BY received_at
LIMIT 50
-- ----
SELECT pg_size_pretty(sum(size_bytes)) AS stored, count(*)
FROM studies
WHERE received_at >= date_trunc('week', now())
-- ----
SELECT id::text, md5(id::text) AS digest FROM studies ORDER BY received_at DESC NULLS LAST LIMIT 3
-- ----
SELECT coalesce(nullif(trim(name), ''), '(no name)') AS name, greatest(created_at, deleted_at) AS last_change
FROM users
ORDER BY id
LIMIT 10
-- ----
SELECT id, email, created_at FROM users ORDER BY id OFFSET 20 ROWS FETCH FIRST 10 ROWS ONLY
-- ----
SELECT array_agg(id ORDER BY id) AS ids, array_length(array_agg(id), 1) AS n FROM users WHERE status = 'blocked'
-- ----
SELECT id FROM users WHERE id = ANY('{1,2,3}'::bigint[])
-- ----
SELECT u.id, u.email, EXISTS (SELECT 1 FROM events e WHERE e.user_id = u.id AND e.kind = 'login') AS ever_logged_in
FROM users u
ORDER BY u.id
LIMIT 20
-- ----
SELECT (SELECT count(*) FROM orders) AS orders, (SELECT count(*) FROM order_items) AS items,
       (SELECT max(created_at) FROM events) AS last_event
-- ----
/* slow-query triage: biggest tables by sequential reads */
SELECT relname, seq_scan, seq_tup_read / nullif(seq_scan, 0) AS avg_rows_per_scan
FROM pg_stat_user_tables
ORDER BY seq_tup_read DESC
LIMIT 10
-- ----
SELECT u.country, o.currency, count(*)
FROM orders o
JOIN users u ON u.id = o.user_id
GROUP BY CUBE (u.country, o.currency)
-- ----
SELECT now(), clock_timestamp(), statement_timestamp(), current_date, localtimestamp
-- ----
SELECT txid_current() AS current_xid
-- ----
SELECT id, user_id, total FROM orders WHERE created_at BETWEEN '2026-01-01' AND '2026-02-01' AND total > 0.0
-- ----
SELECT c.relname, c.relkind, obj_description(c.oid, 'pg_class') AS comment
FROM pg_class c
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'v')
-- ----
SELECT relname, last_autovacuum, autovacuum_count,
       n_dead_tup > 1000 AND coalesce(last_autovacuum, 'epoch'::timestamptz) < now() - interval '1 day' AS needs_attention
FROM pg_stat_user_tables
ORDER BY needs_attention DESC, n_dead_tup DESC;
