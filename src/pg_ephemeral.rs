//! Per-call PostgreSQL credentials: a login role minted for one call and dropped when it ends.
//!
//! Responsibility: for a verb that names a `[postgres_ephemeral.NAME]` source, the daemon —
//! holding the source's admin credential, never the agent — creates a login role
//! `verbd_eph_<16 hex>` with a random password, `VALID UNTIL` the server's `now()` plus the
//! verb's timeout plus the source's slack, `CONNECTION LIMIT 1`, member (`IN ROLE`) of the
//! template role the policy names; the child gets it as `PGUSER`/`PGPASSWORD`; when the call
//! ends the role is made `NOLOGIN`, its sessions are terminated and it is dropped.
//!
//! How the daemon talks to the server: it runs the policy's `psql` binary as its own child
//! (no shell; environment cleared; the admin password in that child's environment only; the SQL
//! on stdin, never in argv), with a time limit. This keeps a PostgreSQL client library out of the
//! daemon; the price is one process per mint and per drop (`benches/ephemeral.rs` measures it).
//!
//! Invariants:
//! - The password is 32 characters from 62 (≈190 bits) drawn from `getrandom`, held in a
//!   [`SecretValue`] (wiped on drop, printed as `[secret]`). The server never receives it: the
//!   role is created with its SCRAM-SHA-256 verifier ([`scram_sha256_verifier`]), the form
//!   PostgreSQL stores anyway, so no statement, server log line or error text carries it.
//! - A role name always starts with [`ROLE_PREFIX`] and is built here ([`RoleName`]), so the SQL
//!   composed from it, the verifier (base64) and a template checked by [`valid_identifier`]
//!   needs no quoting beyond what is written, and a name from the journal that does not fit
//!   the pattern is never put into SQL.
//! - Errors carry psql's stderr with the verifier replaced, never the password.
#![forbid(unsafe_code)]

use crate::secrets::SecretValue;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Every role this module creates starts with this.
pub const ROLE_PREFIX: &str = "verbd_eph_";

/// Characters of a generated password.
pub const PASSWORD_CHARS: usize = 32;

/// PBKDF2 iterations of the SCRAM verifier (PostgreSQL's default `scram_iterations`).
pub const SCRAM_ITERATIONS: u32 = 4096;

/// Longest one admin `psql` (mint or drop) may take before it is killed and counts as failed.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a drop waits for each terminated session of the role to end.
const TERMINATE_WAIT_MS: u32 = 5000;

/// A `[postgres_ephemeral.NAME]` source as compiled from the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgEphemeralSource {
    pub name: String,
    /// The psql binary the daemon runs for mint and drop (absolute).
    pub psql: PathBuf,
    /// `PGHOST`: a socket directory or a host name.
    pub host: String,
    pub port: u16,
    pub database: String,
    /// The admin role the daemon connects as (needs CREATEROLE and pg_signal_backend).
    pub admin_user: String,
    /// The `[secrets.NAME]` holding the admin role's password.
    pub admin_secret: String,
    /// The role each minted role is a member of (its privileges are the call's privileges).
    pub template: String,
    /// Added to the verb's timeout in `VALID UNTIL`.
    pub slack: Duration,
}

/// Whether `name` is a plain lowercase SQL identifier (`[a-z_][a-z0-9_]*`, at most 63 bytes):
/// what a template or admin role name must be, so it is written into SQL as `"name"` safely.
pub fn valid_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'_'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
        && name.len() <= 63
}

/// The name of a role this module minted (or, read back from the journal, one it may have).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RoleName(String);

impl RoleName {
    /// A fresh name: [`ROLE_PREFIX`] and 16 random hex digits.
    pub fn generate() -> Result<RoleName, PgEphemeralError> {
        let mut bytes = [0u8; 8];
        fill_random(&mut bytes)?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Ok(RoleName(format!("{ROLE_PREFIX}{hex}")))
    }

    /// A name read back (from the journal): only one that fits what [`RoleName::generate`] makes.
    pub fn parse(text: &str) -> Option<RoleName> {
        let hex = text.strip_prefix(ROLE_PREFIX)?;
        (hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| RoleName(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RoleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A minted credential: the role and its password (the child's `PGUSER`/`PGPASSWORD`).
#[derive(Debug)]
pub struct Credential {
    pub role: RoleName,
    pub password: SecretValue,
}

/// Why a mint or a drop failed. Never contains the password or the verifier.
#[derive(Debug, thiserror::Error)]
pub enum PgEphemeralError {
    #[error("no random bytes for the credential: {0}")]
    Random(std::io::Error),
    #[error("cannot run {}: {source}", psql.display())]
    Spawn {
        psql: PathBuf,
        source: std::io::Error,
    },
    #[error("psql did not finish within {}s and was killed", ADMIN_TIMEOUT.as_secs())]
    TimedOut,
    #[error("psql failed ({status}): {stderr}")]
    Failed {
        status: String,
        stderr: String,
        /// psql ran nothing on the server: it never connected (exit 2 with libpq's connect
        /// error), stopped at a failed statement (exit 3, `ON_ERROR_STOP`; the statement's
        /// transaction rolled back), or failed itself (exit 1).
        nothing_done: bool,
    },
    #[error("the admin secret `{0}` is not loaded")]
    NoAdminSecret(String),
}

impl PgEphemeralError {
    /// Whether the failed mint certainly created no role (so none is owed a drop). A psql killed
    /// at the time limit, or a connection lost mid-statement, may have created it.
    pub fn nothing_created(&self) -> bool {
        match self {
            PgEphemeralError::Random(_)
            | PgEphemeralError::Spawn { .. }
            | PgEphemeralError::NoAdminSecret(_) => true,
            PgEphemeralError::TimedOut => false,
            PgEphemeralError::Failed { nothing_done, .. } => *nothing_done,
        }
    }
}

fn fill_random(buf: &mut [u8]) -> Result<(), PgEphemeralError> {
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(errno) => return Err(PgEphemeralError::Random(errno.into())),
        }
    }
    Ok(())
}

/// A random password of [`PASSWORD_CHARS`] ASCII letters and digits (no character SASLprep
/// would change, so the verifier computed here is the one the server checks against).
pub fn generate_password() -> Result<SecretValue, PgEphemeralError> {
    const ALPHABET: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut password = Vec::with_capacity(PASSWORD_CHARS);
    let mut pool = zeroize::Zeroizing::new([0u8; 64]);
    while password.len() < PASSWORD_CHARS {
        fill_random(pool.as_mut())?;
        // 248 = 4 × 62: rejecting bytes above it keeps every character equally likely.
        for &b in pool.iter().filter(|b| **b < 248) {
            if password.len() == PASSWORD_CHARS {
                break;
            }
            password.push(ALPHABET[usize::from(b % 62)]);
        }
    }
    Ok(SecretValue::new(password))
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// PostgreSQL's stored form of a SCRAM-SHA-256 password (RFC 5802, RFC 7677):
/// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`. With it the server can check a
/// login but cannot log in as the role, and the password itself never leaves the daemon.
pub fn scram_sha256_verifier(password: &[u8], salt: &[u8], iterations: u32) -> String {
    // PBKDF2-HMAC-SHA256 with one 32-byte block.
    let mut block = Vec::with_capacity(salt.len() + 4);
    block.extend_from_slice(salt);
    block.extend_from_slice(&1u32.to_be_bytes());
    let mut u = zeroize::Zeroizing::new(hmac_sha256(password, &block));
    let mut salted = zeroize::Zeroizing::new(*u);
    for _ in 1..iterations {
        *u = hmac_sha256(password, u.as_ref());
        for (s, x) in salted.iter_mut().zip(u.iter()) {
            *s ^= x;
        }
    }
    let client_key = zeroize::Zeroizing::new(hmac_sha256(salted.as_ref(), b"Client Key"));
    let stored_key = Sha256::digest(client_key.as_ref());
    let server_key = hmac_sha256(salted.as_ref(), b"Server Key");
    let b64 = base64::engine::general_purpose::STANDARD;
    format!(
        "SCRAM-SHA-256${iterations}:{}${}:{}",
        b64.encode(salt),
        b64.encode(stored_key),
        b64.encode(server_key)
    )
}

/// The SQL that creates `role`, valid for `valid_for` from the server's clock.
fn mint_sql(role: &RoleName, verifier: &str, template: &str, valid_for: Duration) -> String {
    // format() with %I/%L quotes on the server; the values are of known charsets anyway.
    format!(
        "DO $verbd$ BEGIN EXECUTE format('CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE \
         NOREPLICATION NOBYPASSRLS INHERIT CONNECTION LIMIT 1 PASSWORD %L VALID UNTIL %L IN ROLE %I', \
         '{role}', '{verifier}', now() + interval '{secs} seconds', '{template}'); END $verbd$;\n",
        secs = valid_for.as_secs().max(1),
    )
}

/// The SQL that ends `role`: no new logins, its sessions terminated (waiting for each), dropped.
/// `IF EXISTS`: a role a crashed mint never created, or one dropped before, is no error.
fn drop_sql(role: &RoleName) -> String {
    format!(
        "DO $verbd$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN \
         EXECUTE format('ALTER ROLE %I NOLOGIN', '{role}'); END IF; END $verbd$;\n\
         SELECT count(pg_terminate_backend(pid, {TERMINATE_WAIT_MS})) FROM pg_stat_activity \
         WHERE usename = '{role}';\n\
         DROP ROLE IF EXISTS \"{role}\";\n"
    )
}

/// Runs `sql` through psql as the source's admin role; `redact` is replaced in its stderr.
async fn admin_psql(
    source: &PgEphemeralSource,
    admin_password: &SecretValue,
    sql: &str,
    redact: Option<&str>,
) -> Result<(), PgEphemeralError> {
    use std::os::unix::ffi::OsStrExt;
    let mut command = tokio::process::Command::new(&source.psql);
    command
        .args([
            "-X",
            "-q",
            "-A",
            "-t",
            "--no-password",
            "-v",
            "ON_ERROR_STOP=1",
        ])
        .env_clear()
        .env("PGHOST", &source.host)
        .env("PGPORT", source.port.to_string())
        .env("PGDATABASE", &source.database)
        .env("PGUSER", &source.admin_user)
        .env("PGAPPNAME", "verbd")
        .env("PGCONNECT_TIMEOUT", "5")
        .env(
            "PGPASSWORD",
            std::ffi::OsStr::from_bytes(admin_password.expose()),
        )
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|source_error| PgEphemeralError::Spawn {
            psql: source.psql.clone(),
            source: source_error,
        })?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let sql = sql.to_string();
    let feed = async move {
        let _ = stdin.write_all(sql.as_bytes()).await;
        // Dropping stdin ends psql's input.
    };
    let finished = tokio::time::timeout(ADMIN_TIMEOUT, async {
        feed.await;
        child.wait_with_output().await
    })
    .await;
    let output = match finished {
        Err(_) => return Err(PgEphemeralError::TimedOut),
        Ok(Err(error)) => {
            return Err(PgEphemeralError::Failed {
                status: "wait failed".into(),
                stderr: error.to_string(),
                nothing_done: false,
            });
        }
        Ok(Ok(output)) => output,
    };
    if output.status.success() {
        return Ok(());
    }
    let mut stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if let Some(secret) = redact {
        stderr = stderr.replace(secret, "[verifier]");
    }
    if let Some((cut, _)) = stderr.char_indices().nth(2000) {
        stderr.truncate(cut);
    }
    let nothing_done = match output.status.code() {
        Some(1 | 3) => true,
        Some(2) => stderr.starts_with("psql: error: connection to server"),
        _ => false,
    };
    Err(PgEphemeralError::Failed {
        status: output.status.to_string(),
        stderr,
        nothing_done,
    })
}

/// Creates a fresh role of `source` named `role` for a call of at most `timeout`.
pub async fn mint(
    source: &PgEphemeralSource,
    admin_password: &SecretValue,
    role: RoleName,
    timeout: Duration,
) -> Result<Credential, PgEphemeralError> {
    let password = generate_password()?;
    let mut salt = [0u8; 16];
    fill_random(&mut salt)?;
    let verifier = scram_sha256_verifier(password.expose(), &salt, SCRAM_ITERATIONS);
    let sql = mint_sql(&role, &verifier, &source.template, timeout + source.slack);
    admin_psql(source, admin_password, &sql, Some(&verifier)).await?;
    Ok(Credential { role, password })
}

/// Ends `role`: no new logins, sessions terminated, dropped (no error when it does not exist).
pub async fn drop_role(
    source: &PgEphemeralSource,
    admin_password: &SecretValue,
    role: &RoleName,
) -> Result<(), PgEphemeralError> {
    admin_psql(source, admin_password, &drop_sql(role), None).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_round_trip_and_nothing_else_parses() {
        let name = RoleName::generate().unwrap();
        assert!(name.as_str().starts_with(ROLE_PREFIX));
        assert_eq!(RoleName::parse(name.as_str()), Some(name.clone()));
        for bad in [
            "verbd_eph_",
            "verbd_eph_0123456789abcdeF",
            "verbd_eph_0123456789abcdef0",
            "postgres",
            "verbd_eph_01234567'; DROP",
        ] {
            assert_eq!(RoleName::parse(bad), None, "{bad}");
        }
        assert_ne!(RoleName::generate().unwrap(), name);
    }

    #[test]
    fn passwords_are_long_alphanumeric_and_differ() {
        let a = generate_password().unwrap();
        let b = generate_password().unwrap();
        assert_eq!(a.expose().len(), PASSWORD_CHARS);
        assert!(a.expose().iter().all(u8::is_ascii_alphanumeric));
        assert_ne!(a.expose(), b.expose());
        assert_eq!(format!("{a:?}"), "[secret]");
    }

    #[test]
    fn identifiers_are_plain_lowercase() {
        assert!(valid_identifier("reporting_ro"));
        assert!(valid_identifier("_x1"));
        for bad in ["", "1x", "Reporting", "a-b", "a\"b", "a b", &"x".repeat(64)] {
            assert!(!valid_identifier(bad), "{bad}");
        }
    }

    #[test]
    fn verifier_matches_an_independent_scram_computation() {
        // Computed with Python's hashlib/hmac (pbkdf2_hmac sha256, "Client Key"/"Server Key")
        // for password "pencil", salt 16 bytes 0..15, 4096 iterations.
        let salt: Vec<u8> = (0u8..16).collect();
        let verifier = scram_sha256_verifier(b"pencil", &salt, 4096);
        assert_eq!(
            verifier,
            "SCRAM-SHA-256$4096:AAECAwQFBgcICQoLDA0ODw==$zHCdol2044/ZyWzPLi7oxApCkamKw9Z+E4U/QApd/5Y=:dd5peBOitVnLNFu7VmwP+HiDaaw4OUCv396eVCWhYiE="
        );
        assert!(!verifier.contains("pencil"));
    }

    #[test]
    fn the_sql_carries_the_verifier_never_the_password() {
        let role = RoleName::parse("verbd_eph_0123456789abcdef").unwrap();
        let sql = mint_sql(
            &role,
            "SCRAM-SHA-256$4096:c2FsdA==$a:b",
            "reporting_ro",
            Duration::from_secs(95),
        );
        assert!(sql.contains("CONNECTION LIMIT 1"));
        assert!(sql.contains("interval '95 seconds'"));
        assert!(sql.contains("IN ROLE %I"));
        assert!(drop_sql(&role).contains("DROP ROLE IF EXISTS \"verbd_eph_0123456789abcdef\""));
    }
}
