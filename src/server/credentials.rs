//! Per-call database roles in the daemon: minted for one run, dropped when it ends, and owed
//! roles dropped at the next start.
//!
//! Order, so that no role can exist without a journaled name: `credential_minted` is journaled
//! (fsync'd) *before* `CREATE ROLE`; `credential_dropped` only after `DROP ROLE` succeeded. The
//! proposal book keeps every name minted and not dropped ([`crate::approvals::Book`]); a daemon
//! killed mid-call leaves it there, and the next start drops it ([`Daemon::drop_owed_credentials`]).
//!
//! Failure is closed and loud: a mint that fails (or whose record cannot be written) fails the
//! call before the child starts — never a static secret instead; a drop that fails fails the
//! call's answer. Both are journaled (`credential_failed`) and counted in `status`.
#![forbid(unsafe_code)]

use super::Daemon;
use crate::events::{Bounded, CredentialAction, Event};
use crate::exec::CallCredential;
use crate::loader::Prepared;
use crate::pg_ephemeral::{self, Credential, PgEphemeralSource, RoleName};
use crate::policy::PreparedCall;
use crate::secrets::SecretValue;

/// A role minted for one run: what is needed to drop it, and what the child gets.
pub(super) struct Lease {
    source: PgEphemeralSource,
    admin_password: SecretValue,
    credential: Credential,
}

impl Lease {
    /// The child's `PGUSER` and `PGPASSWORD`.
    pub(super) fn env(&self) -> [CallCredential<'_>; 2] {
        [
            CallCredential {
                key: "PGUSER",
                value: self.credential.role.as_str().as_bytes(),
                secret: false,
            },
            CallCredential::secret("PGPASSWORD", &self.credential.password),
        ]
    }
}

impl Daemon {
    /// The role for a run of `call` (journaled as `exec_seq`), or `Ok(None)` when its verb uses
    /// none. `Err` is the reason the run must not start.
    pub(super) async fn mint_credential(
        &self,
        prepared: &Prepared,
        call: &PreparedCall,
        exec_seq: u64,
    ) -> Result<Option<Lease>, String> {
        let Some(name) = &call.limits.postgres_ephemeral else {
            return Ok(None);
        };
        let source = prepared
            .policy
            .postgres_ephemeral
            .get(name)
            .cloned()
            .ok_or_else(|| format!("postgres_ephemeral `{name}` is not in the policy in force"))?;
        let admin_password = prepared
            .secrets
            .get(&source.admin_secret)
            .cloned()
            .ok_or_else(|| {
                pg_ephemeral::PgEphemeralError::NoAdminSecret(source.admin_secret.clone())
                    .to_string()
            })?;
        let role = RoleName::generate().map_err(|e| e.to_string())?;
        let valid_for = call.limits.timeout + source.slack;
        self.record(Event::CredentialMinted {
            source: source.name.clone(),
            role: role.to_string(),
            verb: call.verb.clone(),
            exec_seq,
            valid_seconds: valid_for.as_secs(),
        })
        .await
        .map_err(|e| format!("the role's record cannot be written ({e})"))?;
        self.counted.credential("minting");
        match pg_ephemeral::mint(&source, &admin_password, role.clone(), call.limits.timeout).await
        {
            Ok(credential) => {
                self.counted.credential("minted");
                Ok(Some(Lease {
                    source,
                    admin_password,
                    credential,
                }))
            }
            Err(error) => {
                let message = format!(
                    "no per-call database role could be minted from postgres_ephemeral `{name}`: {error}; nothing ran"
                );
                self.counted.credential("mint_failed");
                let owed = !error.nothing_created();
                let _ = self
                    .record(Event::CredentialFailed {
                        source: source.name.clone(),
                        role: role.to_string(),
                        action: CredentialAction::Mint,
                        error: Bounded::new(&error.to_string()),
                        owed,
                    })
                    .await;
                // The statement may have created the role before failing: drop it now (or, if
                // the server is unreachable, the next start does).
                if owed {
                    let _ = self.end_role(&source, &admin_password, &role, false).await;
                }
                Err(message)
            }
        }
    }

    /// Drops a run's role when the run ended; `Err` names why it could not be.
    pub(super) async fn drop_credential(&self, lease: Lease) -> Result<(), String> {
        self.end_role(
            &lease.source,
            &lease.admin_password,
            &lease.credential.role,
            false,
        )
        .await
    }

    /// Drops `role` and journals the outcome (`credential_dropped` or `credential_failed`).
    async fn end_role(
        &self,
        source: &PgEphemeralSource,
        admin_password: &SecretValue,
        role: &RoleName,
        at_start: bool,
    ) -> Result<(), String> {
        match pg_ephemeral::drop_role(source, admin_password, role).await {
            Ok(()) => {
                self.counted.credential("dropped");
                self.record(Event::CredentialDropped {
                    source: source.name.clone(),
                    role: role.to_string(),
                    at_start,
                })
                .await
                .map(|_| ())
                .map_err(|e| format!("role {role} was dropped, but its record failed ({e})"))
            }
            Err(error) => {
                self.counted.credential("drop_failed");
                tracing::error!(%role, %error, "a per-call database role could not be dropped");
                let _ = self
                    .record(Event::CredentialFailed {
                        source: source.name.clone(),
                        role: role.to_string(),
                        action: CredentialAction::Drop,
                        error: Bounded::new(&error.to_string()),
                        owed: true,
                    })
                    .await;
                Err(format!(
                    "per-call database role {role} could not be dropped: {error}; it stops working at its VALID UNTIL and the next start drops it"
                ))
            }
        }
    }

    /// At start: drops every role the journal says was minted and never dropped (a daemon
    /// killed mid-call). A role whose source is gone from the policy, or whose drop fails, stays
    /// owed (journaled, counted) for the next start.
    pub async fn drop_owed_credentials(&self) {
        let owed: Vec<(String, String)> = self.ledger.read(|book| {
            book.credentials_owed()
                .map(|(role, source)| (role.to_string(), source.to_string()))
                .collect()
        });
        let prepared = self.prepared();
        for (role, source_name) in owed {
            let Some(role) = RoleName::parse(&role) else {
                continue;
            };
            let source = prepared.policy.postgres_ephemeral.get(&source_name);
            let admin = source.and_then(|s| prepared.secrets.get(&s.admin_secret));
            let (Some(source), Some(admin)) = (source, admin) else {
                self.counted.credential("drop_failed");
                let _ = self
                    .record(Event::CredentialFailed {
                        source: source_name.clone(),
                        role: role.to_string(),
                        action: CredentialAction::Drop,
                        error: Bounded::new(&format!(
                            "postgres_ephemeral `{source_name}` (or its admin secret) is not in the policy in force, so role {role} cannot be dropped; drop it by hand"
                        )),
                        owed: true,
                    })
                    .await;
                continue;
            };
            let _ = self.end_role(source, admin, &role, true).await;
        }
    }
}
