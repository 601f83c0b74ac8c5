//! The user database's answer for a caller the kernel named (invariant 3): the user name and
//! group names for the uid and gid that SO_PEERCRED reported. Uncached; `identity` caches it
//! and is what the server asks. Nothing the client sends is consulted.
#![forbid(unsafe_code)]

use nix::unistd::{Gid, Group, Uid, User};
use std::ffi::CString;

/// The user database's (uncached) answer for a uid and primary gid: the user name, and the
/// names of the primary and supplementary groups.
pub fn lookup_user_database(uid: u32, gid: u32) -> (Option<String>, Vec<String>) {
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
    let groups: Vec<String> = gids
        .into_iter()
        .filter_map(|g| Group::from_gid(g).ok().flatten().map(|g| g.name))
        .collect();
    (user.map(|u| u.name), groups)
}
