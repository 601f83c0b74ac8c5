//! The read-only SQL corpus (tests/data/sql_read_only_corpus.sql) and the application schema its
//! queries run against; shared by tests/sql/sql.rs (the validator alone) and tests/sql/sql_multiline.rs
//! (the same corpus through the daemon's call path).
#![allow(dead_code)] // each crate uses part of it

pub const CORPUS: &str = include_str!("../data/sql_read_only_corpus.sql");
/// The record separator documented at the top of the corpus file.
pub const SEPARATOR: &str = "-- ----";

/// The application tables the corpus queries, with a few rows each.
pub const APP_SCHEMA: &str = r#"
CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL UNIQUE, name text, country text,
    status text NOT NULL DEFAULT 'active', created_at timestamptz NOT NULL DEFAULT now(),
    deleted_at timestamptz);
CREATE TABLE orders (id bigint PRIMARY KEY, user_id bigint NOT NULL REFERENCES users (id),
    status text NOT NULL, total numeric(12,2) NOT NULL, currency text NOT NULL DEFAULT 'EUR',
    created_at timestamptz NOT NULL DEFAULT now(), paid_at timestamptz);
CREATE INDEX orders_user_id ON orders (user_id);
CREATE TABLE order_items (order_id bigint NOT NULL REFERENCES orders (id), sku text NOT NULL,
    qty int NOT NULL, unit_price numeric(12,2) NOT NULL, PRIMARY KEY (order_id, sku));
CREATE TABLE events (id bigserial PRIMARY KEY, user_id bigint, kind text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE jobs (id bigserial PRIMARY KEY, queue text NOT NULL, state text NOT NULL,
    attempts int NOT NULL DEFAULT 0, run_at timestamptz, last_error text,
    created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE studies (id uuid PRIMARY KEY, clinic_id int NOT NULL, modality text NOT NULL,
    received_at timestamptz, processed_at timestamptz, status text NOT NULL, size_bytes bigint);
INSERT INTO users (id, email, name, country, status, created_at)
    SELECT g, 'user' || g || '@example.com', 'User ' || g, (ARRAY['DE', 'RU', 'FR'])[g % 3 + 1],
           CASE WHEN g % 10 = 0 THEN 'blocked' ELSE 'active' END, now() - g * interval '1 day'
    FROM generate_series(1, 30) AS g;
INSERT INTO orders (id, user_id, status, total, created_at, paid_at)
    SELECT g, g % 30 + 1, (ARRAY['paid', 'failed', 'refunded'])[g % 3 + 1], g * 12.5,
           now() - g * interval '5 hours', now() - g * interval '4 hours'
    FROM generate_series(1, 60) AS g;
INSERT INTO order_items SELECT id, 'SKU-' || (id % 7), id % 4 + 1, 9.99 FROM orders;
INSERT INTO events (user_id, kind, payload)
    SELECT g % 30 + 1, (ARRAY['login', 'login_failed', 'cart'])[g % 3 + 1],
           jsonb_build_object('ip', '10.0.0.' || (g % 4), 'items',
                              jsonb_build_array(jsonb_build_object('sku', 'SKU-1', 'qty', '2')))
    FROM generate_series(1, 90) AS g;
INSERT INTO jobs (queue, state, attempts, run_at, last_error)
    VALUES ('mail', 'failed', 3, now(), E'timeout at C:\\Program Files\\app; retrying'),
           ('mail', 'running', 1, now() - interval '1 hour', NULL),
           ('reports', 'done', 1, now(), NULL);
INSERT INTO studies
    SELECT gen_random_uuid(), g % 5, (ARRAY['CT', 'MR', 'XR'])[g % 3 + 1],
           now() - g * interval '3 hours', now() - g * interval '2 hours',
           CASE WHEN g % 9 = 0 THEN 'error' ELSE 'done' END, g * 1048576
    FROM generate_series(1, 40) AS g;
ANALYZE;
"#;

/// The corpus records, in file order.
pub fn corpus_records() -> Vec<String> {
    let mut records = Vec::new();
    let mut current: Option<String> = None;
    for line in CORPUS.lines() {
        if line == SEPARATOR {
            if let Some(record) = current.take() {
                records.push(record);
            }
            current = Some(String::new());
        } else if let Some(record) = current.as_mut() {
            record.push_str(line);
            record.push('\n');
        }
    }
    records.extend(current);
    records
}
