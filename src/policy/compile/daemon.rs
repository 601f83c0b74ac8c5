//! Compiling `[daemon]` and `[commands]`: socket modes that never grant access to others,
//! absolute paths, limits of at least 1, a bounded queue timeout.
#![forbid(unsafe_code)]

use super::{Ctx, count_or, duration_or};
use crate::policy::schema::{RawCommands, RawDaemon};
use crate::policy::units::parse_mode;
use crate::policy::{CommandsConfig, DaemonConfig};
use std::time::Duration;

/// The longest `daemon.queue_timeout` may be.
const MAX_QUEUE_TIMEOUT: Duration = Duration::from_secs(600);

pub(super) fn build_daemon(ctx: &mut Ctx, raw: &RawDaemon) -> DaemonConfig {
    let socket_mode = match &raw.socket_mode {
        None => 0o660,
        Some(m) => parse_mode(m.get_ref()).unwrap_or_else(|e| {
            ctx.at(m.span(), e);
            0o660
        }),
    };
    if socket_mode & 0o007 != 0
        && let Some(m) = &raw.socket_mode
    {
        ctx.at(
            m.span(),
            "socket_mode must not grant access to others (use a group: socket_group)",
        );
    }
    for p in [&raw.socket, &raw.approver_socket, &raw.state_dir]
        .into_iter()
        .flatten()
    {
        if !p.get_ref().is_absolute() {
            ctx.at(p.span(), "path must be absolute");
        }
    }
    let queue_timeout = duration_or(ctx, &raw.queue_timeout, Duration::from_secs(5));
    if queue_timeout > MAX_QUEUE_TIMEOUT
        && let Some(v) = &raw.queue_timeout
    {
        ctx.at(
            v.span(),
            format!(
                "daemon.queue_timeout must be at most {}s: a queued call holds its connection",
                MAX_QUEUE_TIMEOUT.as_secs()
            ),
        );
    }
    DaemonConfig {
        socket: raw.socket.as_ref().map(|s| s.get_ref().clone()),
        socket_mode,
        socket_group: raw.socket_group.as_ref().map(|s| s.get_ref().clone()),
        approver_socket: raw.approver_socket.as_ref().map(|s| s.get_ref().clone()),
        approver_socket_group: raw
            .approver_socket_group
            .as_ref()
            .map(|s| s.get_ref().clone()),
        state_dir: raw.state_dir.as_ref().map(|s| s.get_ref().clone()),
        user: raw.user.as_ref().map(|s| s.get_ref().clone()),
        allow_root: raw.allow_root,
        max_connections: count_or(ctx, "max_connections", &raw.max_connections, 256),
        max_connections_per_uid: count_or(
            ctx,
            "max_connections_per_uid",
            &raw.max_connections_per_uid,
            32,
        ),
        max_waits: count_or(ctx, "max_waits", &raw.max_waits, 256),
        max_waits_per_uid: count_or(ctx, "max_waits_per_uid", &raw.max_waits_per_uid, 16),
        approver_max_connections: count_or(
            ctx,
            "approver_max_connections",
            &raw.approver_max_connections,
            64,
        ),
        max_executions: count_or(ctx, "max_executions", &raw.max_executions, 16),
        queue_timeout: queue_timeout.min(MAX_QUEUE_TIMEOUT),
        max_request_bytes: raw
            .max_request_bytes
            .unwrap_or(crate::protocol::MAX_REQUEST_BYTES),
        request_timeout: duration_or(ctx, &raw.request_timeout, Duration::from_secs(10)),
        shutdown_grace: duration_or(ctx, &raw.shutdown_grace, Duration::from_secs(10)),
    }
}

/// `[commands]`: privileged paths must be absolute (they are compared with absolute words).
pub(super) fn build_commands(ctx: &mut Ctx, raw: &RawCommands) -> CommandsConfig {
    let mut paths = Vec::new();
    for spanned in &raw.privileged_paths {
        let path = spanned.get_ref();
        if path.is_absolute() {
            paths.push(path.clone());
        } else {
            ctx.at(
                spanned.span(),
                format!(
                    "[commands] privileged_paths: {} is not absolute",
                    path.display()
                ),
            );
        }
    }
    CommandsConfig {
        privileged_programs: raw.privileged_programs.clone(),
        privileged_paths: paths,
    }
}
