//! Caller identity from the kernel (invariant 3).
//!
//! The uid, gid and pid come from SO_PEERCRED on the accepted socket; the user name and group
//! names are looked up in the user database from that uid. Nothing the client sends is consulted.
#![forbid(unsafe_code)]

use crate::policy::Caller;
use nix::unistd::{Gid, Group, Uid, User};
use std::ffi::CString;

/// Resolve a caller from kernel-reported credentials.
pub fn caller_from_cred(uid: u32, gid: u32, pid: i32) -> Caller {
    let user = User::from_uid(Uid::from_raw(uid)).ok().flatten();
    let mut gids: Vec<Gid> = vec![Gid::from_raw(gid)];
    if let Some(u) = &user
        && let Ok(name) = CString::new(u.name.as_bytes())
        && let Ok(list) = nix::unistd::getgrouplist(&name, u.gid)
    {
        gids.extend(list);
    }
    gids.sort_by_key(|g| g.as_raw());
    gids.dedup();
    let groups = gids
        .into_iter()
        .filter_map(|g| Group::from_gid(g).ok().flatten().map(|g| g.name))
        .collect();
    Caller {
        uid,
        gid,
        pid,
        user: user.map(|u| u.name),
        groups,
    }
}
