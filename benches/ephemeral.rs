//! What a per-call PostgreSQL role costs (`[postgres_ephemeral.NAME]`): the wall time of the
//! daemon's mint (random password, SCRAM verifier, `CREATE ROLE` through its own psql child) and
//! of its drop (`NOLOGIN`, sessions terminated, `DROP ROLE`), against a throwaway PostgreSQL
//! cluster with SCRAM authentication (tests/common/pg.rs). Beside them, one login and query with
//! a static password (what every call pays anyway), for scale. Prints a Markdown table of
//! p50/p99/max in milliseconds.
//!
//! `cargo bench --bench ephemeral`. Needs root (the cluster runs as the `postgres` account) and
//! PostgreSQL 15's binaries. Knob: `VERBD_BENCH_ITERATIONS` (default 100).

#[path = "../tests/common/pg.rs"]
mod pg;

use std::process::Command;
use std::time::{Duration, Instant};
use verbd::pg_ephemeral::{self, PgEphemeralSource, RoleName};
use verbd::secrets::SecretValue;

const PSQL: &str = "/usr/lib/postgresql/15/bin/psql";
const ADMIN_PASSWORD: &str = "admin-Password-for-the-bench-0123";

fn quantiles(mut samples: Vec<Duration>) -> (f64, f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (ms(at(0.5)), ms(at(0.99)), ms(*samples.last().unwrap()))
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("ephemeral bench: needs root; skipped");
        return;
    }
    let iterations: usize = std::env::var("VERBD_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let Some(cluster) = pg::PgCluster::start() else {
        return;
    };
    cluster.setup(&format!(
        "CREATE ROLE verbd_admin LOGIN CREATEROLE PASSWORD '{ADMIN_PASSWORD}';\n\
         GRANT pg_signal_backend TO verbd_admin;\n\
         CREATE ROLE reporting_ro NOLOGIN;\n\
         GRANT SELECT ON t TO reporting_ro;"
    ));
    cluster.require_passwords();
    let source = PgEphemeralSource {
        name: "bench".into(),
        psql: PSQL.into(),
        host: cluster.socket_dir().display().to_string(),
        port: pg::PORT,
        database: pg::DATABASE.into(),
        admin_user: "verbd_admin".into(),
        admin_secret: "pg_admin".into(),
        template: "reporting_ro".into(),
        slack: Duration::from_secs(30),
    };
    let admin = SecretValue::new(ADMIN_PASSWORD.as_bytes().to_vec());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let static_login = || {
        Command::new(PSQL)
            .args(["-X", "--no-password", "-At", "-h"])
            .arg(cluster.socket_dir())
            .args(["-d", pg::DATABASE, "-U", "verbd_admin", "-c", "SELECT 1"])
            .env_clear()
            .env("PGPASSWORD", ADMIN_PASSWORD)
            .output()
            .unwrap()
    };
    let (mut mints, mut drops, mut logins) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..iterations {
        let started = Instant::now();
        let credential = runtime
            .block_on(pg_ephemeral::mint(
                &source,
                &admin,
                RoleName::generate().unwrap(),
                Duration::from_secs(30),
            ))
            .expect("mint");
        mints.push(started.elapsed());
        let started = Instant::now();
        runtime
            .block_on(pg_ephemeral::drop_role(&source, &admin, &credential.role))
            .expect("drop");
        drops.push(started.elapsed());
        let started = Instant::now();
        assert!(static_login().status.success());
        logins.push(started.elapsed());
    }
    let left = cluster.psql(&[
        "-At",
        "-c",
        "SELECT count(*) FROM pg_roles WHERE rolname LIKE 'verbd\\_eph\\_%'",
    ]);
    let left = String::from_utf8_lossy(&left.stdout).trim().to_string();
    println!("### Per-call PostgreSQL role ({iterations} iterations, PostgreSQL 15, SCRAM)\n");
    println!("| step | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|");
    for (name, samples) in [
        ("mint (verifier + psql CREATE ROLE)", mints),
        ("drop (NOLOGIN, terminate, DROP ROLE)", drops),
        ("for scale: one psql login + SELECT 1", logins),
    ] {
        let (p50, p99, max) = quantiles(samples);
        println!("| {name} | {p50:.1} | {p99:.1} | {max:.1} |");
    }
    println!("\nRoles left after the run: {left}");
}
