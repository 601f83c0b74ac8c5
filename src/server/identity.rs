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
//!
//! Cost: a hit is one `stat` per source (eight `statx` on a host without userdb directories)
//! and runs on the request's own task; a miss asks the user database on the blocking pool.
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
    fn of(meta: &fs::Metadata) -> FileStamp {
        FileStamp {
            device: meta.dev(),
            inode: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
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
    /// One `stat` per source (and per entry of a source that is a directory): the stamp and
    /// whether it is a directory come from the same call.
    fn of(sources: &[PathBuf]) -> Stamp {
        let stamp_of = |path: &Path| fs::symlink_metadata(path).ok();
        let mut stamps = Vec::with_capacity(sources.len());
        for source in sources {
            let meta = stamp_of(source);
            let is_dir = meta.as_ref().is_some_and(fs::Metadata::is_dir);
            stamps.push((source.clone(), meta.as_ref().map(FileStamp::of)));
            if is_dir && let Ok(entries) = fs::read_dir(source) {
                let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
                names.sort();
                stamps.extend(names.into_iter().map(|path| {
                    let stamp = stamp_of(&path).as_ref().map(FileStamp::of);
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

/// Resolve a caller from kernel-reported credentials (SO_PEERCRED), through the cache. A hit is
/// answered on the calling task (one `stat` per source, a few microseconds, no thread hand-off);
/// only a miss, which asks the user database and may block on it, goes to the blocking pool.
pub async fn caller_from_cred(uid: u32, gid: u32, pid: i32) -> Caller {
    let cache = shared();
    match cache.cached(uid, gid, pid) {
        Ok(caller) => caller,
        Err(miss) => tokio::task::spawn_blocking(move || cache.look_up(miss))
            .await
            .expect("caller lookup panicked"),
    }
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
        self.cached(uid, gid, pid)
            .unwrap_or_else(|miss| self.look_up(miss))
    }

    /// The caller from the cache, without asking the user database: stamps every source once
    /// (emptying the cache if one changed) and answers if an entry for these ids is there and
    /// young enough. Otherwise the [`Miss`] to hand to [`look_up`](Self::look_up).
    pub fn cached(&self, uid: u32, gid: u32, pid: i32) -> Result<Caller, Miss> {
        let miss = |stamp| Miss {
            uid,
            gid,
            pid,
            stamp,
        };
        if !self.cacheable {
            return Err(miss(None));
        }
        let stamp = Stamp::of(&self.sources);
        let mut entries = self.entries.lock().expect("identity cache lock");
        if entries.stamp.as_ref() != Some(&stamp) {
            entries.by_ids.clear();
            entries.stamp = Some(stamp.clone());
        }
        match entries.by_ids.get(&(uid, gid)) {
            Some(identity) if identity.looked_up.elapsed() < MAX_AGE => Ok(Caller {
                uid,
                gid,
                pid,
                user: identity.user.clone(),
                groups: identity.groups.clone(),
            }),
            _ => Err(miss(Some(stamp))),
        }
    }

    /// The caller from the user database (blocking), stored in the cache unless a source was
    /// too recently changed to be trusted.
    pub fn look_up(&self, miss: Miss) -> Caller {
        let Miss {
            uid,
            gid,
            pid,
            stamp,
        } = miss;
        let (user, groups) = (self.lookup)(uid, gid);
        if let Some(stamp) = stamp.filter(|stamp| !stamp.racy()) {
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
        Caller {
            uid,
            gid,
            pid,
            user,
            groups,
        }
    }
}

/// A lookup [`IdentityCache::cached`] could not answer, with the sources' stamp taken before it
/// (`None`: this name service is not cached).
pub struct Miss {
    uid: u32,
    gid: u32,
    pid: i32,
    stamp: Option<Stamp>,
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
