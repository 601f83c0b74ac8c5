//! Compiling `[secrets]` and `[postgres_ephemeral]`: a secret is never inline and has exactly one
//! source; a database source names an absolute psql, plain role names and an admin secret that
//! exists.
#![forbid(unsafe_code)]

use super::Ctx;
use crate::pg_ephemeral::PgEphemeralSource;
use crate::policy::schema::{RawPostgresEphemeral, RawSecret};
use crate::policy::units::parse_duration;
use crate::secrets::SecretSource;
use std::collections::BTreeMap;
use std::time::Duration;

/// The secrets; one that is written inline or has no single source is an error and left out.
pub(super) fn build_secrets(
    ctx: &mut Ctx,
    raw: &BTreeMap<String, toml::Spanned<RawSecret>>,
) -> BTreeMap<String, SecretSource> {
    let mut out = BTreeMap::new();
    for (name, s) in raw {
        let span = s.span();
        let s = s.get_ref();
        if s.value.is_some() {
            ctx.at(
                span,
                format!(
                    "secret `{name}` is written inline; secrets never live in the policy. Put it in a file (file = \"/etc/verbd/secrets/{name}\", mode 0600) or a systemd credential (credential = \"{name}\")"
                ),
            );
            continue;
        }
        let sources = [
            s.file.clone().map(SecretSource::File),
            s.credential.clone().map(SecretSource::Credential),
            s.env.clone().map(SecretSource::Env),
        ];
        let mut given = sources.into_iter().flatten();
        match (given.next(), given.next()) {
            (Some(source), None) => {
                if let SecretSource::File(p) = &source
                    && !p.is_absolute()
                {
                    ctx.at(span, format!("secret `{name}`: file path must be absolute"));
                }
                out.insert(name.clone(), source);
            }
            _ => ctx.at(
                span,
                format!("secret `{name}` needs exactly one of file, credential or env"),
            ),
        }
    }
    out
}

/// `[postgres_ephemeral.NAME]`: absolute psql, plain role names, an admin secret that exists.
pub(super) fn build_postgres_ephemeral(
    ctx: &mut Ctx,
    raw: &BTreeMap<String, toml::Spanned<RawPostgresEphemeral>>,
    secrets: &BTreeMap<String, SecretSource>,
) -> BTreeMap<String, PgEphemeralSource> {
    let mut out = BTreeMap::new();
    for (name, spanned) in raw {
        let span = spanned.span();
        let s = spanned.get_ref();
        let errors_before = ctx.diagnostics.len();
        let refuse = |ctx: &mut Ctx, what: String| {
            ctx.at(span.clone(), format!("postgres_ephemeral `{name}`: {what}"));
        };
        if !s.psql.is_absolute() {
            refuse(ctx, "psql must be an absolute path".into());
        }
        if s.host.is_empty() || s.host.contains(['\0', '\n']) {
            refuse(ctx, "host must be a socket directory or a host name".into());
        }
        for (key, value) in [
            ("admin_user", &s.admin_user),
            ("template", &s.template),
            ("database", &s.database),
        ] {
            if !crate::pg_ephemeral::valid_identifier(value) {
                refuse(
                    ctx,
                    format!("{key} `{value}` must be a plain lowercase name ([a-z_][a-z0-9_]*)"),
                );
            }
        }
        if s.template.starts_with(crate::pg_ephemeral::ROLE_PREFIX) {
            refuse(ctx, "the template must not look like a minted role".into());
        }
        if !secrets.contains_key(&s.admin_secret) {
            refuse(
                ctx,
                format!(
                    "admin_secret `{}` is not defined in [secrets]",
                    s.admin_secret
                ),
            );
        }
        let slack = match &s.slack {
            None => Duration::from_secs(60),
            Some(text) => parse_duration(text).unwrap_or_else(|e| {
                refuse(ctx, format!("slack: {e}"));
                Duration::from_secs(60)
            }),
        };
        if ctx.diagnostics.len() > errors_before {
            continue;
        }
        out.insert(
            name.clone(),
            PgEphemeralSource {
                name: name.clone(),
                psql: s.psql.clone(),
                host: s.host.clone(),
                port: s.port.unwrap_or(5432),
                database: s.database.clone(),
                admin_user: s.admin_user.clone(),
                admin_secret: s.admin_secret.clone(),
                template: s.template.clone(),
                slack,
            },
        );
    }
    out
}
