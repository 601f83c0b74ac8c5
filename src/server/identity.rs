//! The caller-identity cache: the user-database answer (user name, group names) per uid and
//! primary gid, so a request does not pay a getpwuid + getgrouplist + one getgrgid per group.
//!
//! Invariant: a cached answer is used only while every file the answer could come from is
//! unchanged, checked at every lookup (one `stat` per source: device, inode, size, mtime and
//! ctime to the nanosecond). The sources are `/etc/passwd`, `/etc/group`, `/etc/nsswitch.conf`
//! and, because nss-systemd also answers, the directories (and each entry in them) where systemd
//! keeps dynamic users and userdb records. Any change empties the whole cache. Three more rules
//! keep it from ever answering stale:
//! - when `nsswitch.conf` names a source for `passwd` or `group` other than `files` and
//!   `systemd` (LDAP, sss, winbind, NIS …), whose changes no local file shows, nothing is cached;
//! - an answer is not cached while a source changed within the last [`RACY_WINDOW`] (a file
//!   rewritten twice within one timestamp tick, at the same size and inode, would look unchanged;
//!   the same reasoning as git's "racily clean" index entries);
//! - an entry is used for at most [`MAX_AGE`], which bounds what no file shows at all (userdb
//!   services answering over varlink, such as systemd-homed).
//!
//! The pid is never cached: it is the connection's own, from the kernel.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::policy::Caller;

/// A source changed more recently than this is not trusted to show its next change.
pub const RACY_WINDOW: Duration = Duration::from_secs(2);
/// The longest an entry is used, whatever the sources say.
pub const MAX_AGE: Duration = Duration::from_secs(30);

/// The user-database files of the host, and the directories nss-systemd reads.
const SYSTEM_SOURCES: [&str; 8] = [
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/run/systemd/dynamic-uid",
    "/etc/userdb",
    "/run/userdb",
    "/run/host/userdb",
    "/usr/lib/userdb",
];

/// NSS services whose every change shows in [`SYSTEM_SOURCES`].
const WATCHABLE_SERVICES: [&str; 2] = ["files", "systemd"];

/// A `stat` of one source (`None`: absent or unreadable, which is a state too).
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileStamp {
    device: u64,
    inode: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        fs::symlink_metadata(path).ok().map(|meta| FileStamp {
            device: meta.dev(),
            inode: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }

    fn changed_within(&self, window: Duration) -> bool {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        // The content's time: what a same-size rewrite within one tick would leave unchanged.
        let (seconds, nanos) = self.mtime;
        let changed = Duration::new(seconds.max(0) as u64, nanos.clamp(0, 999_999_999) as u32);
        now.saturating_sub(changed) < window
    }
}

/// The state of every source: each path's stamp, and for a directory each entry's.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp(Vec<(PathBuf, Option<FileStamp>)>);

impl Stamp {
    fn of(sources: &[PathBuf]) -> Stamp {
        let mut stamps = Vec::with_capacity(sources.len());
        for source in sources {
            let stamp = FileStamp::of(source);
            let is_dir = fs::symlink_metadata(source).is_ok_and(|meta| meta.is_dir());
            stamps.push((source.clone(), stamp));
            if is_dir && let Ok(entries) = fs::read_dir(source) {
                let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
                names.sort();
                stamps.extend(names.into_iter().map(|path| {
                    let stamp = FileStamp::of(&path);
                    (path, stamp)
                }));
            }
        }
        Stamp(stamps)
    }

    fn racy(&self) -> bool {
        self.0
            .iter()
            .filter_map(|(_, stamp)| stamp.as_ref())
            .any(|stamp| stamp.changed_within(RACY_WINDOW))
    }
}

/// What the user database said about one (uid, primary gid).
#[derive(Clone)]
struct Identity {
    user: Option<String>,
    groups: Vec<String>,
    looked_up: Instant,
}

struct Entries {
    stamp: Option<Stamp>,
    by_ids: HashMap<(u32, u32), Identity>,
}

/// The uncached answer: (user name, group names) of a uid and primary gid.
type Lookup = Box<dyn Fn(u32, u32) -> (Option<String>, Vec<String>) + Send + Sync>;

/// Caller identities, cached per (uid, gid) with the invalidation described in the module docs.
pub struct IdentityCache {
    sources: Vec<PathBuf>,
    /// `false` when the name service has sources no file shows the changes of.
    cacheable: bool,
    lookup: Lookup,
    entries: Mutex<Entries>,
}

/// Resolve a caller from kernel-reported credentials (SO_PEERCRED), through the cache.
pub fn caller_from_cred(uid: u32, gid: u32, pid: i32) -> Caller {
    shared().caller(uid, gid, pid)
}

/// The daemon's cache over the host's user database.
pub fn shared() -> &'static IdentityCache {
    static SHARED: LazyLock<IdentityCache> = LazyLock::new(|| {
        let cache = IdentityCache::new(
            SYSTEM_SOURCES.iter().map(PathBuf::from).collect(),
            Path::new("/etc/nsswitch.conf"),
            Box::new(super::peer::lookup_user_database),
        );
        if !cache.cacheable {
            tracing::info!(
                "caller identities are looked up for every request: /etc/nsswitch.conf names a \
                 passwd or group source other than files and systemd, whose changes cannot be \
                 watched"
            );
        }
        cache
    });
    &SHARED
}

impl IdentityCache {
    /// A cache over `sources` (stamped at every lookup), answering with `lookup` on a miss; it
    /// caches only if `nsswitch` names no source but files and systemd for passwd and group.
    pub fn new(sources: Vec<PathBuf>, nsswitch: &Path, lookup: Lookup) -> IdentityCache {
        IdentityCache {
            sources,
            cacheable: only_watchable_services(nsswitch),
            lookup,
            entries: Mutex::new(Entries {
                stamp: None,
                by_ids: HashMap::new(),
            }),
        }
    }

    /// The caller with these kernel-reported ids (blocking on a miss: the user database).
    pub fn caller(&self, uid: u32, gid: u32, pid: i32) -> Caller {
        let (user, groups) = self.identity(uid, gid);
        Caller {
            uid,
            gid,
            pid,
            user,
            groups,
        }
    }

    fn identity(&self, uid: u32, gid: u32) -> (Option<String>, Vec<String>) {
        if !self.cacheable {
            return (self.lookup)(uid, gid);
        }
        let stamp = Stamp::of(&self.sources);
        {
            let mut entries = self.entries.lock().expect("identity cache lock");
            if entries.stamp.as_ref() != Some(&stamp) {
                entries.by_ids.clear();
                entries.stamp = Some(stamp.clone());
            }
            if let Some(identity) = entries.by_ids.get(&(uid, gid))
                && identity.looked_up.elapsed() < MAX_AGE
            {
                return (identity.user.clone(), identity.groups.clone());
            }
        }
        let (user, groups) = (self.lookup)(uid, gid);
        if !stamp.racy() {
            let mut entries = self.entries.lock().expect("identity cache lock");
            // Stored under the stamp taken before the lookup: had a source changed meanwhile,
            // the next lookup's stamp differs and empties the cache.
            if entries.stamp.as_ref() == Some(&stamp) {
                entries.by_ids.insert(
                    (uid, gid),
                    Identity {
                        user: user.clone(),
                        groups: groups.clone(),
                        looked_up: Instant::now(),
                    },
                );
            }
        }
        (user, groups)
    }
}

/// Whether `passwd` and `group` in `nsswitch` use only [`WATCHABLE_SERVICES`]. An unreadable
/// file disables the cache (glibc would then use its built-in default, not worth guessing).
fn only_watchable_services(nsswitch: &Path) -> bool {
    let Ok(text) = fs::read_to_string(nsswitch) else {
        return false;
    };
    text.lines()
        .map(|line| line.split('#').next().unwrap_or_default())
        .filter_map(|line| line.split_once(':'))
        .filter(|(database, _)| matches!(database.trim(), "passwd" | "group"))
        .all(|(_, services)| {
            services
                .split_whitespace()
                .filter(|word| !word.starts_with('['))
                .all(|service| WATCHABLE_SERVICES.contains(&service))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A user database in a file: `uid:group,group` lines; counts the lookups.
    fn lookup_in(db: PathBuf, lookups: Arc<AtomicUsize>) -> Lookup {
        Box::new(move |uid, _gid| {
            lookups.fetch_add(1, Ordering::SeqCst);
            let text = fs::read_to_string(&db).unwrap();
            let groups = text
                .lines()
                .filter_map(|line| line.split_once(':'))
                .find(|(id, _)| id.parse() == Ok(uid))
                .map(|(_, groups)| groups.split(',').map(str::to_owned).collect())
                .unwrap_or_default();
            (Some(format!("user{uid}")), groups)
        })
    }

    fn set_mtime_back(path: &Path) {
        let old = SystemTime::now() - Duration::from_secs(60);
        fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }

    #[test]
    fn nsswitch_with_remote_sources_disables_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nsswitch.conf");
        fs::write(
            &path,
            "passwd: files systemd\ngroup: files [SUCCESS=merge] systemd\nhosts: dns\n",
        )
        .unwrap();
        assert!(only_watchable_services(&path));
        fs::write(&path, "passwd: files\ngroup: files sss # remote\n").unwrap();
        assert!(!only_watchable_services(&path));
        assert!(!only_watchable_services(&dir.path().join("missing")));
    }

    /// A cached uid whose group membership changes gets the new groups at the next lookup; an
    /// unchanged database is not asked again; a just-written database is not trusted yet.
    #[test]
    fn a_membership_change_is_seen_at_the_next_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("group");
        let nsswitch = dir.path().join("nsswitch.conf");
        fs::write(&nsswitch, "passwd: files\ngroup: files\n").unwrap();
        fs::write(&db, "61900:agents,admins\n").unwrap();
        set_mtime_back(&db);
        let lookups = Arc::new(AtomicUsize::new(0));
        let cache = IdentityCache::new(
            vec![db.clone()],
            &nsswitch,
            lookup_in(db.clone(), lookups.clone()),
        );

        assert_eq!(cache.caller(61900, 61900, 1).groups, ["agents", "admins"]);
        assert_eq!(cache.caller(61900, 61900, 2).groups, ["agents", "admins"]);
        assert_eq!(
            cache.caller(61900, 61900, 2).pid,
            2,
            "the pid is the connection's"
        );
        assert_eq!(lookups.load(Ordering::SeqCst), 1, "cached");

        // Removed from `admins` (same size: only the content and the times differ).
        fs::write(&db, "61900:agents,nobody\n").unwrap();
        assert_eq!(cache.caller(61900, 61900, 3).groups, ["agents", "nobody"]);
        // Just written: asked again each time until older than the racy window.
        assert_eq!(cache.caller(61900, 61900, 3).groups, ["agents", "nobody"]);
        assert_eq!(lookups.load(Ordering::SeqCst), 3, "racy: not cached");
        set_mtime_back(&db);
        cache.caller(61900, 61900, 4);
        cache.caller(61900, 61900, 4);
        assert_eq!(
            lookups.load(Ordering::SeqCst),
            4,
            "cached again once settled"
        );

        // A remote name service: never cached.
        fs::write(&nsswitch, "passwd: files ldap\ngroup: files ldap\n").unwrap();
        let uncached =
            IdentityCache::new(vec![db.clone()], &nsswitch, lookup_in(db, lookups.clone()));
        uncached.caller(61900, 61900, 5);
        uncached.caller(61900, 61900, 5);
        assert_eq!(lookups.load(Ordering::SeqCst), 6);
    }
}
