//! The create broker of `verbd exec`: every syscall that gives a new name to something — `open`
//! and `openat` with `O_CREAT`, `creat`, `mkdir`, `mknod`, `symlink`, `link` and `rename` in all
//! their forms — or changes an entry by name — `open`/`openat` for writing or with `O_TRUNC`,
//! `unlink`, `rmdir`, `truncate`, `chmod`, `chown` and `utimensat` and their variants — is
//! performed outside the sandboxed program, by a thread that refuses it on a protected name
//! (module `protected`), and refuses a change of mode, owner or times outside the write roots.
//!
//! Why: Landlock grants rights on directories, not names, does not govern `chmod`, and a mount
//! can only cover a name that exists. Under `verbd exec` in a mount namespace the write roots are
//! granted whole, so without this broker an agent could create a new top-level `AGENTS.md` or
//! `.envrc`, a hook in a new nested `.git`, recreate a protected symlink it had removed, or
//! write a protected entry deeper than the start-up walk binds; under the Landlock-only split it
//! could `chmod +x` a hook. With it, protected entries stay as they are and a protected name
//! that does not exist cannot come into being in a write root, in either isolation mode.
//!
//! How: the child's last seccomp filter (module `seccomp`, `exec_program`) answers those
//! syscalls with `SECCOMP_RET_USER_NOTIF` (`openat2`, whose flags sit behind a pointer, answers
//! `ENOSYS`: libc falls back to `openat`). The connect broker's thread (module `unix_broker`)
//! receives each notification, copies the path strings out of the caller's memory, and hands the
//! request with the caller's root and umask (and the caller's own descriptors where a path names
//! one) to the **create thread**. That thread confined itself at start exactly as the child is:
//! the same Landlock ruleset (a clone of the profile's template), no_new_privs, no capabilities,
//! the run-as identity where the profile has one — so it can never create, open, remove or
//! rename anything the program could not, and it adds one rule: no protected name.
//!
//! Resolution happens in the caller's view of the file system: every path is made absolute (the
//! caller's working directory or directory fd, as the kernel names it) and resolved beneath the
//! caller's root (`/proc/TID/root`, which in a mount namespace carries its read-only binds) with
//! `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`, so an absolute symlink cannot lead out of
//! the namespace to the host's writable originals, and `/proc` magic links, which would lead to
//! this thread's process, are never followed (`/proc/self/…` is rewritten to the caller's pid,
//! which this thread's Landlock domain cannot reach; the plain forms `/dev/std{in,out,err}`,
//! `/dev/fd/N`, `/proc/self/fd/N` reopen the caller's own descriptor). The directory's name is
//! checked to lead back to the same inode, the final component is acted on relative to it
//! (`O_NOFOLLOW` for creates), and a new descriptor reaches the caller with
//! `SECCOMP_IOCTL_NOTIF_ADDFD` + `SECCOMP_ADDFD_FLAG_SEND`.
//!
//! Invariants:
//! - never `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the kernel never acts on the caller's strings,
//!   which can change after they were read;
//! - a protected name is never created, and a protected entry is never written, truncated,
//!   removed, renamed, re-moded, re-owned, re-timed or given a second name: `EACCES`;
//! - outside the write roots nothing is truncated, re-moded, re-owned or re-timed, though the
//!   program owns it (Landlock governs none of these but `truncate`): `EACCES`. The check is made
//!   on the descriptor the thread resolved, and the change on that same descriptor. `mkdir`/`mknod`/`symlink`/`link`
//!   onto an existing one answer `EEXIST`; an existing one opened only for reading opens;
//! - the kernel checks mount points only in their own namespace: the create thread refuses to
//!   rename or remove one of the caller's (`EBUSY`), as the kernel would there;
//! - git's files that redirect it are created only with content this thread checked: a linked
//!   worktree's `commondir` (only `../..`, written by this thread before the program writes),
//!   its `gitdir` (one absolute path of a `.git`) and a gitlink `.git` file (only `gitdir:` a
//!   worktree's or submodule's git directory in a write root). The program writes into a pipe;
//!   a drain thread, confined as this one, reads it to the end, checks it and creates the file;
//!   the create thread joins every drain whose writer closed before it performs the next call,
//!   and the launcher before it exits, so a call after the close finds the file in place;
//! - the directories of a linked worktree's git directory followed out of the write roots
//!   (module `git_dirs`) count as in a write root, each path judged as the same path in a `.git`
//!   there (`.git/worktrees/NAME/…`, `.git/objects/…`): what git obeys in them is kept the same
//!   way; the rest of that repository is in no write root;
//! - fail closed: a path that cannot be read, a working directory that cannot be named, a
//!   directory whose name does not lead back to the same inode, a create through a dangling
//!   symlink — refused. When the broker is gone, the kernel answers `ENOSYS`.
//!
//! Not brokered: `bind` of a pathname Unix socket (a socket inode is no file a tool reads),
//! descriptor-based writes (`write`, `ftruncate`): the broker never hands out a writable
//! descriptor on a protected entry; extended attributes, which the filter refuses whole
//! (`EOPNOTSUPP`, module `seccomp`: a POSIX ACL would grant what `chmod` may not); inode flags
//! (`FS_IOC_SETFLAGS`, `FS_IOC_FSSETXATTR`: `chattr`), which the filter refuses whole (`EPERM`).
//! `chown` is brokered although changing the owner needs a capability: the group may be changed
//! to any of the caller's groups.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};

use landlock::{RulesetCreated, RulesetStatus};

use super::git_dirs::{GitArea, GitLink};
use super::notify::{self, Reporter, ThreadIdentity};
use crate::protected::ProtectedNames;

/// Open flags that create.
const CREATING: i32 = libc::O_CREAT | libc::O_EXCL;

/// Where a program may not create protected names.
#[derive(Debug, Clone)]
pub struct CreatePolicy {
    /// The profile's write roots, canonical: protected names are matched relative to each.
    pub write_roots: Vec<PathBuf>,
    pub protected: ProtectedNames,
    /// `(st_dev, st_ino)` of every mount point of the program's mount namespace (read-only
    /// binds and pinned directories). The kernel refuses to rename a mount point only in the
    /// namespace it is mounted in, and the create thread lives outside: it refuses these itself.
    pub mount_points: Vec<(u64, u64)>,
    /// The directories of linked worktrees' git directories followed out of the write roots
    /// (module `git_dirs`), each judged as the same path in a `.git` of a write root.
    pub git_areas: Vec<GitArea>,
}

impl CreatePolicy {
    /// The policy for `spec`: its write roots made canonical, the inodes of the mount points
    /// `mounts` (the paths of the program's protected mounts), the git directories `followed`
    /// out of the write roots.
    pub fn of<'a>(
        spec: &super::SandboxSpec,
        mounts: impl IntoIterator<Item = &'a Path>,
        followed: &[GitLink],
    ) -> CreatePolicy {
        use std::os::unix::fs::MetadataExt;
        CreatePolicy {
            write_roots: spec
                .write
                .iter()
                .filter_map(|root| std::fs::canonicalize(root).ok())
                .collect(),
            protected: spec.protected.clone(),
            mount_points: mounts
                .into_iter()
                .filter_map(|path| std::fs::symlink_metadata(path).ok())
                .map(|meta| (meta.dev(), meta.ino()))
                .collect(),
            git_areas: followed
                .iter()
                .filter_map(|link| link.outcome.as_ref().ok())
                .flat_map(|followed| followed.areas())
                .collect(),
        }
    }

    /// `path` (absolute, as the caller sees it) relative to each write root containing it, and
    /// as the same path in a write root's `.git` where it lies in a followed git directory.
    fn relatives<'a>(&'a self, path: &'a Path) -> impl Iterator<Item = PathBuf> + 'a {
        let in_roots = self
            .write_roots
            .iter()
            .filter_map(move |root| path.strip_prefix(root).ok())
            .map(Path::to_path_buf);
        let in_git_areas = self.git_areas.iter().filter_map(move |area| {
            let rest = path.strip_prefix(&area.dir).ok()?;
            Some(if rest.as_os_str().is_empty() {
                area.as_in_root.clone()
            } else {
                area.as_in_root.join(rest)
            })
        });
        in_roots.chain(in_git_areas)
    }

    /// The protected rule `path` (absolute, as the caller sees it) hits, relative to any write
    /// root containing it, or as a protected absolute path. git's working data is not
    /// protected ([`GitPlace::is_data`]).
    pub fn protected(&self, path: &Path) -> Option<String> {
        if let Some(hit) = self.protected.paths().iter().find(|p| path.starts_with(p)) {
            return Some(format!("protected path {}", hit.display()));
        }
        self.relatives(path)
            .find_map(|relative| {
                let hit = self.protected.match_path(&relative)?;
                match self.git_place_in_root(&relative) {
                    Some(place) if place.is_data() => None,
                    _ => Some(hit),
                }
            })
            .map(|hit| hit.to_string())
    }

    /// Does `path` (absolute, as the caller sees it) lie in a write root (or is it one), or in
    /// a directory of a followed git directory?
    fn in_write_root(&self, path: &Path) -> bool {
        self.relatives(path).next().is_some()
    }

    /// What `path` is to git, when it lies in a write root, in a `.git` directory that no other
    /// rule protects.
    fn git_place(&self, path: &Path) -> Option<GitPlace> {
        self.relatives(path)
            .find_map(|relative| self.git_place_in_root(&relative))
    }

    fn git_place_in_root(&self, relative: &Path) -> Option<GitPlace> {
        let names: Vec<String> = relative
            .components()
            .map(|c| crate::protected::fold(&c.as_os_str().to_string_lossy()))
            .collect();
        let git = names.iter().rposition(|name| name == ".git")?;
        let git_dir: PathBuf = relative.components().take(git + 1).collect();
        // Inside `.claude/…/.git`, a policy's own name, or git's own state: not git's data.
        if self.protected.match_subtree(&git_dir).is_some() {
            return None;
        }
        let tail: Vec<&str> = names[git + 1..].iter().map(String::as_str).collect();
        Some(match tail.as_slice() {
            [] => GitPlace::Directory,
            ["hooks"] => GitPlace::HooksDirectory,
            ["hooks", sample] if sample.len() > ".sample".len() && sample.ends_with(".sample") => {
                GitPlace::SampleHook
            }
            ["info"] => GitPlace::InfoDirectory,
            ["info", "exclude"] => GitPlace::Exclude,
            ["rebase-merge" | "rebase-apply" | "sequencer", ..] => GitPlace::State,
            ["config" | "config.worktree"] => GitPlace::Config,
            ["worktrees"] => GitPlace::WorktreesDirectory,
            ["worktrees", _] => GitPlace::WorktreeDirectory,
            ["worktrees", _, "commondir"] => GitPlace::CommonDir,
            ["worktrees", _, "gitdir"] => GitPlace::WorktreeLocation,
            ["worktrees", _, "config.worktree"] => GitPlace::Config,
            // What git would obey if the directory were a git directory of its own (a
            // `commondir` removed): never written.
            [
                "worktrees",
                _,
                "config" | "hooks" | "info" | "modules" | "worktrees",
                ..,
            ] => {
                return None;
            }
            ["worktrees", _, ..] => GitPlace::WorktreeData,
            _ => return None,
        })
    }

    /// Is `path` (canonical, as the caller sees it) a directory a gitlink file may name: a
    /// linked worktree's git directory (`.git/worktrees/NAME`) or a submodule's
    /// (`.git/modules/NAME…`), in a write root, where this broker keeps what git obeys in it?
    fn is_gitlink_target(&self, path: &Path) -> bool {
        if self.git_place(path) == Some(GitPlace::WorktreeDirectory) {
            return true;
        }
        self.write_roots
            .iter()
            .filter_map(|root| path.strip_prefix(root).ok())
            .any(|relative| {
                let names: Vec<String> = relative
                    .components()
                    .map(|c| crate::protected::fold(&c.as_os_str().to_string_lossy()))
                    .collect();
                names
                    .iter()
                    .position(|name| name == ".git")
                    .is_some_and(|git| {
                        names.get(git + 1).is_some_and(|next| next == "modules")
                            && names.len() > git + 2
                            && !names[git + 1..].iter().any(|name| name == ".git")
                    })
            })
    }

    /// Is `path` a proper prefix of a protected rule (`.git` for `.git/hooks`) in a write root?
    /// A directory renamed there would bring protected names into being all at once.
    fn leads_to_protected(&self, path: &Path) -> bool {
        self.relatives(path)
            .any(|relative| !relative.as_os_str().is_empty() && self.protected.leads_to(&relative))
    }

    /// For `--print-status`, when `cwd` lies in a linked worktree (or a submodule: a `.git`
    /// file above it): where git takes its git directory and its common directory from, as git
    /// follows the gitlink and `commondir`, and whether a write root holds them.
    pub fn describe_worktree(&self, cwd: &Path) -> Option<String> {
        let top = cwd.ancestors().find(|dir| dir.join(".git").exists())?;
        let gitlink = top.join(".git");
        if !std::fs::symlink_metadata(&gitlink).ok()?.is_file() {
            return None;
        }
        let content = std::fs::read_to_string(&gitlink).ok()?;
        let target = content.lines().next()?.strip_prefix("gitdir: ")?;
        let git_dir = std::fs::canonicalize(top.join(target.trim_end())).ok()?;
        let common_dir = match std::fs::read_to_string(git_dir.join("commondir")) {
            Ok(common) => std::fs::canonicalize(git_dir.join(common.trim_end())).ok()?,
            Err(_) => git_dir.clone(),
        };
        let followed = |dir: &Path| {
            self.git_areas
                .iter()
                .any(|area| area.dir == dir || area.dir.parent() == Some(dir))
        };
        let place = |dir: &Path| {
            if self.write_roots.iter().any(|root| dir.starts_with(root)) {
                "in a write root: its working data writable, what git obeys kept"
            } else if followed(dir) {
                "outside the write roots, followed from the worktree's `.git` file: its working data writable, what git obeys kept"
            } else {
                "outside the write roots: read-only here, git cannot commit in this worktree"
            }
        };
        Some(format!(
            "git: {} is a linked worktree (`.git` file); git directory {} ({}); common directory (commondir) {} ({})",
            top.display(),
            git_dir.display(),
            place(&git_dir),
            common_dir.display(),
            place(&common_dir)
        ))
    }

    /// One line for `--print-status`.
    pub fn describe(&self) -> String {
        "create broker: in every write root new protected names are refused and protected entries kept at any depth (creating, writing, removing, renaming and chmod calls performed outside the sandbox)".into()
    }
}

/// Where a protected name is git's own working data, which git must write for `init`, `clone`,
/// `rebase`, `cherry-pick`, `worktree add`: the create broker lets the program write it, or
/// create it with checked content ([`CheckedFile`]). Everything else in a `.git` directory that
/// a rule protects (hooks, `info/attributes`, `commondir`, `modules`) stays protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GitPlace {
    /// A `.git` directory itself: may be made (`mkdir`), never be a file, link or rename target.
    Directory,
    /// `.git/hooks`: may be made empty (`git init` copies its templates); a hook never.
    HooksDirectory,
    /// `.git/hooks/NAME.sample`: git never runs a sample (it runs a hook by its exact name, and
    /// renaming a sample to one is a new protected name).
    SampleHook,
    /// `.git/info`: may be made (`info/attributes` in it stays protected).
    InfoDirectory,
    /// `.git/info/exclude`: names of untracked files git leaves out; runs nothing.
    Exclude,
    /// `.git/rebase-merge`, `.git/rebase-apply`, `.git/sequencer`: a rebase's, `am`'s or
    /// cherry-pick's state. Its todo list runs only when a human continues that operation.
    State,
    /// `.git/config`, `.git/config.worktree`, `.git/worktrees/NAME/config.worktree`: replaced
    /// only by a rename whose new content adds data keys alone (module `git_config`).
    Config,
    /// `.git/worktrees`: may be made (`git worktree add`).
    WorktreesDirectory,
    /// `.git/worktrees/NAME`: a linked worktree's git directory; may be made.
    WorktreeDirectory,
    /// In `.git/worktrees/NAME`: the linked worktree's `HEAD`, index, logs, refs, `locked`,
    /// rebase state — its working data (not `config`, `hooks`, `info`, `modules`, `worktrees`,
    /// which git would obey were the directory a git directory of its own).
    WorktreeData,
    /// `.git/worktrees/NAME/commondir`: where git takes the config, hooks and objects from.
    /// Only `../..` (what git writes) is ever written: the repository itself.
    CommonDir,
    /// `.git/worktrees/NAME/gitdir`: where the linked worktree lies (`git worktree list`,
    /// `prune`, `repair`); git takes no config or hooks through it. Written only as one
    /// absolute path of a `.git`.
    WorktreeLocation,
}

/// A protected file that comes into being only with content the broker checked: the program's
/// `open(O_CREAT | O_WRONLY)` of the absent name gets the write end of a pipe, a drain thread
/// reads it to the end and creates the file itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CheckedFile {
    /// `.git/worktrees/NAME/commondir`: made at once with `../..`, before the program writes
    /// (git reads it right after); what the program writes is compared and never used.
    CommonDir,
    /// `.git/worktrees/NAME/gitdir`: one absolute path ending in `/.git`.
    WorktreeLocation,
    /// A gitlink `.git` file: `gitdir: PATH`, where PATH is a linked worktree's or a
    /// submodule's git directory in a write root ([`CreatePolicy::is_gitlink_target`]).
    Gitlink,
}

impl GitPlace {
    /// Written like any file.
    fn is_data(self) -> bool {
        matches!(
            self,
            GitPlace::SampleHook | GitPlace::Exclude | GitPlace::State | GitPlace::WorktreeData
        )
    }

    /// Made by `mkdir` only.
    fn is_directory(self) -> bool {
        matches!(
            self,
            GitPlace::Directory
                | GitPlace::HooksDirectory
                | GitPlace::InfoDirectory
                | GitPlace::WorktreesDirectory
                | GitPlace::WorktreeDirectory
        )
    }

    /// Created only with checked content, when the program creates it for writing (a `.git`
    /// there is a gitlink file).
    fn checked_file(self) -> Option<CheckedFile> {
        match self {
            GitPlace::CommonDir => Some(CheckedFile::CommonDir),
            GitPlace::WorktreeLocation => Some(CheckedFile::WorktreeLocation),
            GitPlace::Directory => Some(CheckedFile::Gitlink),
            _ => None,
        }
    }
}

/// The largest git config file the broker reads: larger is refused.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A path argument as the create thread resolves it.
#[derive(Debug)]
enum Place {
    /// Absolute in the caller's view, resolved beneath its root.
    Path(PathBuf),
    /// One of the caller's own descriptors (`/dev/fd/N`, `/proc/self/fd/N`, `AT_EMPTY_PATH`).
    Descriptor(OwnedFd),
}

#[derive(Debug)]
enum Operation {
    Open {
        place: Place,
        flags: i32,
        mode: u32,
    },
    Mkdir {
        place: Place,
        mode: u32,
    },
    Mknod {
        place: Place,
        mode: u32,
        device: u64,
    },
    Symlink {
        target: Vec<u8>,
        place: Place,
    },
    Link {
        old: Place,
        new: Place,
        flags: i32,
    },
    Rename {
        old: Place,
        new: Place,
        flags: u32,
    },
    Unlink {
        place: Place,
        flags: i32,
    },
    Truncate {
        place: Place,
        length: i64,
    },
    Chmod {
        place: Place,
        mode: u32,
        flags: i32,
    },
    /// `chown` and kin: `u32::MAX` leaves the owner or group as it is.
    Chown {
        place: Place,
        uid: u32,
        gid: u32,
        follow: bool,
    },
    /// `utimensat` and kin: the access and modification times, `None` for "now".
    Times {
        place: Place,
        times: Option<[libc::timespec; 2]>,
        follow: bool,
    },
}

/// One brokered call, ready for the create thread.
struct Request {
    /// The listener the notification came from, to answer on.
    listener: Arc<OwnedFd>,
    id: u64,
    tid: u32,
    root: OwnedFd,
    umask: u32,
    operation: Operation,
}

/// What a syscall gets back.
enum Outcome {
    /// 0 or an errno (positive).
    Errno(i32),
    /// A new descriptor for the caller; `O_CLOEXEC` in the caller when `close_on_exec`.
    Descriptor { fd: OwnedFd, close_on_exec: bool },
}

/// What [`perform`] leaves: an answer, or an open that may wait (a FIFO), to run and answer on
/// a thread of its own.
enum Performed {
    Now(Outcome),
    Waits {
        open: Box<dyn FnOnce() -> Result<OwnedFd, i32> + Send>,
        close_on_exec: bool,
    },
    /// A checked file: the program gets a pipe, a drain thread creates the file.
    Checked {
        write: CheckedWrite,
        root: OwnedFd,
        umask: u32,
        close_on_exec: bool,
    },
}

/// How many waiting opens (FIFOs) of one program the broker holds at once, each on a thread;
/// one more answers `EAGAIN`, so a program cannot make the launcher start threads without bound.
const MAX_WAITING_OPENS: usize = 64;

/// The handle of a running create thread.
pub(super) struct CreateBroker {
    requests: mpsc::Sender<Request>,
}

impl CreateBroker {
    /// Starts the create thread: it confines itself with `ruleset` (and `identity`), then
    /// performs each request and answers it. Fails if it cannot confine itself — the caller
    /// then ends the program before it runs.
    pub(super) fn start(
        policy: CreatePolicy,
        ruleset: RulesetCreated,
        identity: Option<ThreadIdentity>,
        reporter: Reporter,
    ) -> io::Result<CreateBroker> {
        let (requests, incoming) = mpsc::channel::<Request>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        std::thread::Builder::new()
            .name("verbd-create-broker".into())
            .spawn(move || {
                let confined = confine_this_thread(ruleset, identity);
                let failed = confined.is_err();
                let _ = ready_tx.send(confined);
                if failed {
                    return;
                }
                let waiting = Arc::new(AtomicUsize::new(0));
                let policy = Arc::new(policy);
                for request in incoming {
                    settle_checked_writes();
                    let (listener, id, tid) =
                        (Arc::clone(&request.listener), request.id, request.tid);
                    match perform(&policy, request, reporter) {
                        Performed::Checked {
                            write,
                            root,
                            umask,
                            close_on_exec,
                        } => {
                            let outcome = match start_checked(
                                &waiting, &policy, write, root, umask, tid, reporter,
                            ) {
                                Ok(fd) => Outcome::Descriptor { fd, close_on_exec },
                                Err(errno) => Outcome::Errno(errno),
                            };
                            answer(&listener, id, tid, outcome, reporter);
                        }
                        Performed::Waits {
                            open,
                            close_on_exec,
                        } => wait_on_a_thread(
                            &waiting,
                            listener,
                            id,
                            tid,
                            open,
                            close_on_exec,
                            reporter,
                        ),
                        Performed::Now(outcome) => answer(&listener, id, tid, outcome, reporter),
                    }
                }
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(CreateBroker { requests }),
            Ok(Err(reason)) => Err(io::Error::other(format!(
                "the create broker cannot confine itself: {reason}"
            ))),
            Err(_) => Err(io::Error::other("the create broker thread ended at start")),
        }
    }

    /// Reads one notification's arguments (on the connect broker's thread, which may read the
    /// caller's memory and descriptors) and queues it. `Some(errno)` to answer now.
    pub(super) fn submit(
        &self,
        listener: &Arc<OwnedFd>,
        notification: &libc::seccomp_notif,
    ) -> Option<i32> {
        let tid = notification.pid;
        let pidfd = match notify::pidfd_open(tid) {
            Ok(fd) => fd,
            Err(_) => return Some(libc::ESRCH),
        };
        if !notify::id_valid(listener, notification.id) {
            return None;
        }
        let caller = Caller { tid, pidfd: &pidfd };
        let prepared = caller
            .operation(&notification.data)
            .and_then(|operation| Ok((caller.root()?, caller.umask()?, operation)));
        if !notify::id_valid(listener, notification.id) {
            return None;
        }
        match prepared {
            Err(errno) => Some(errno),
            Ok((root, umask, operation)) => {
                let request = Request {
                    listener: Arc::clone(listener),
                    id: notification.id,
                    tid,
                    root,
                    umask,
                    operation,
                };
                // The thread is gone only if it could not confine itself (then nothing runs).
                self.requests.send(request).err().map(|_| libc::ENOSYS)
            }
        }
    }
}

/// Runs a waiting open on a thread of its own (it inherits this thread's confinement: Landlock
/// domain, no_new_privs, credentials) and answers from there; `EAGAIN` beyond
/// [`MAX_WAITING_OPENS`].
fn wait_on_a_thread(
    waiting: &Arc<AtomicUsize>,
    listener: Arc<OwnedFd>,
    id: u64,
    tid: u32,
    open: Box<dyn FnOnce() -> Result<OwnedFd, i32> + Send>,
    close_on_exec: bool,
    reporter: Reporter,
) {
    let taken = waiting
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < MAX_WAITING_OPENS).then_some(n + 1)
        })
        .is_ok();
    if !taken {
        notify::reply(&listener, id, libc::EAGAIN);
        return;
    }
    let count = Arc::clone(waiting);
    let answer_listener = Arc::clone(&listener);
    let spawned = std::thread::Builder::new()
        .name("verbd-create-wait".into())
        .spawn(move || {
            let outcome = match open() {
                Ok(fd) => Outcome::Descriptor { fd, close_on_exec },
                Err(errno) => Outcome::Errno(errno),
            };
            answer(&answer_listener, id, tid, outcome, reporter);
            count.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        waiting.fetch_sub(1, Ordering::AcqRel);
        notify::reply(&listener, id, libc::EAGAIN);
    }
}

/// The confinement of the create thread, as the program's: identity, no capabilities, its own
/// umask, no_new_privs and the profile's Landlock ruleset (all per thread).
fn confine_this_thread(
    ruleset: RulesetCreated,
    identity: Option<ThreadIdentity>,
) -> Result<(), String> {
    if let Some(identity) = identity {
        notify::take_identity(identity).map_err(|e| format!("run-as identity: {e}"))?;
    }
    for set in [
        caps::CapSet::Ambient,
        caps::CapSet::Effective,
        caps::CapSet::Inheritable,
        caps::CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|e| format!("dropping capabilities: {e}"))?;
    }
    // SAFETY: plain syscall without pointers; gives this thread its own umask and cwd.
    if unsafe { libc::unshare(libc::CLONE_FS) } != 0 {
        return Err(format!("unshare(CLONE_FS): {}", io::Error::last_os_error()));
    }
    match ruleset.restrict_self() {
        Ok(status) if status.ruleset == RulesetStatus::FullyEnforced => Ok(()),
        Ok(status) => Err(format!("Landlock only {:?}", status.ruleset)),
        Err(e) => Err(format!("Landlock: {e}")),
    }
}

/// The calling thread of one notification.
struct Caller<'a> {
    tid: u32,
    pidfd: &'a OwnedFd,
}

impl Caller<'_> {
    fn operation(&self, data: &libc::seccomp_data) -> Result<Operation, i32> {
        let arg = |i: usize| data.args[i];
        let int = |i: usize| data.args[i] as i32;
        let nr = i64::from(data.nr);
        let operation = match nr {
            libc::SYS_open => Operation::Open {
                place: self.place(libc::AT_FDCWD, arg(0), false)?,
                flags: int(1),
                mode: arg(2) as u32,
            },
            libc::SYS_openat => Operation::Open {
                place: self.place(int(0), arg(1), false)?,
                flags: int(2),
                mode: arg(3) as u32,
            },
            libc::SYS_creat => Operation::Open {
                place: self.place(libc::AT_FDCWD, arg(0), false)?,
                flags: libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
                mode: arg(1) as u32,
            },
            libc::SYS_mkdir => Operation::Mkdir {
                place: self.place(libc::AT_FDCWD, arg(0), false)?,
                mode: arg(1) as u32,
            },
            libc::SYS_mkdirat => Operation::Mkdir {
                place: self.place(int(0), arg(1), false)?,
                mode: arg(2) as u32,
            },
            libc::SYS_mknod => Operation::Mknod {
                place: self.place(libc::AT_FDCWD, arg(0), false)?,
                mode: arg(1) as u32,
                device: arg(2),
            },
            libc::SYS_mknodat => Operation::Mknod {
                place: self.place(int(0), arg(1), false)?,
                mode: arg(2) as u32,
                device: arg(3),
            },
            libc::SYS_symlink => Operation::Symlink {
                target: self.string(arg(0))?,
                place: self.place(libc::AT_FDCWD, arg(1), false)?,
            },
            libc::SYS_symlinkat => Operation::Symlink {
                target: self.string(arg(0))?,
                place: self.place(int(1), arg(2), false)?,
            },
            libc::SYS_link => Operation::Link {
                old: self.place(libc::AT_FDCWD, arg(0), false)?,
                new: self.place(libc::AT_FDCWD, arg(1), false)?,
                flags: 0,
            },
            libc::SYS_linkat => {
                let flags = int(4);
                Operation::Link {
                    old: self.place(int(0), arg(1), flags & libc::AT_EMPTY_PATH != 0)?,
                    new: self.place(int(2), arg(3), false)?,
                    flags,
                }
            }
            libc::SYS_rename => Operation::Rename {
                old: self.place(libc::AT_FDCWD, arg(0), false)?,
                new: self.place(libc::AT_FDCWD, arg(1), false)?,
                flags: 0,
            },
            libc::SYS_renameat => Operation::Rename {
                old: self.place(int(0), arg(1), false)?,
                new: self.place(int(2), arg(3), false)?,
                flags: 0,
            },
            libc::SYS_renameat2 => Operation::Rename {
                old: self.place(int(0), arg(1), false)?,
                new: self.place(int(2), arg(3), false)?,
                flags: arg(4) as u32,
            },
            libc::SYS_unlink => Operation::Unlink {
                place: self.place(libc::AT_FDCWD, arg(0), false)?,
                flags: 0,
            },
            libc::SYS_rmdir => Operation::Unlink {
                place: self.place(libc::AT_FDCWD, arg(0), false)?,
                flags: libc::AT_REMOVEDIR,
            },
            libc::SYS_unlinkat => Operation::Unlink {
                place: self.place(int(0), arg(1), false)?,
                flags: int(2),
            },
            libc::SYS_truncate => Operation::Truncate {
                place: self.place(libc::AT_FDCWD, arg(0), false)?,
                length: arg(1) as i64,
            },
            libc::SYS_chmod => Operation::Chmod {
                place: self.place(libc::AT_FDCWD, arg(0), false)?,
                mode: arg(1) as u32,
                flags: 0,
            },
            libc::SYS_fchmod => Operation::Chmod {
                place: self.descriptor(int(0))?,
                mode: arg(1) as u32,
                flags: 0,
            },
            libc::SYS_fchmodat => Operation::Chmod {
                place: self.place(int(0), arg(1), false)?,
                mode: arg(2) as u32,
                flags: 0,
            },
            libc::SYS_fchmodat2 => {
                let flags = int(3);
                Operation::Chmod {
                    place: self.place(int(0), arg(1), flags & libc::AT_EMPTY_PATH != 0)?,
                    mode: arg(2) as u32,
                    flags,
                }
            }
            libc::SYS_chown | libc::SYS_lchown => Operation::Chown {
                place: self.place(libc::AT_FDCWD, arg(0), false)?,
                uid: arg(1) as u32,
                gid: arg(2) as u32,
                follow: nr == libc::SYS_chown,
            },
            libc::SYS_fchown => Operation::Chown {
                place: self.descriptor(int(0))?,
                uid: arg(1) as u32,
                gid: arg(2) as u32,
                follow: true,
            },
            libc::SYS_fchownat => {
                let flags = int(4);
                if flags & !(libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) != 0 {
                    return Err(libc::EINVAL);
                }
                Operation::Chown {
                    place: self.place(int(0), arg(1), flags & libc::AT_EMPTY_PATH != 0)?,
                    uid: arg(2) as u32,
                    gid: arg(3) as u32,
                    follow: flags & libc::AT_SYMLINK_NOFOLLOW == 0,
                }
            }
            libc::SYS_utimensat => {
                let flags = int(3);
                if flags & !(libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) != 0 {
                    return Err(libc::EINVAL);
                }
                Operation::Times {
                    place: self.times_place(int(0), arg(1), flags)?,
                    times: self.timespecs(arg(2))?,
                    follow: flags & libc::AT_SYMLINK_NOFOLLOW == 0,
                }
            }
            libc::SYS_futimesat => Operation::Times {
                place: self.times_place(int(0), arg(1), 0)?,
                times: self.timevals(arg(2))?,
                follow: true,
            },
            libc::SYS_utimes => Operation::Times {
                place: self.place(libc::AT_FDCWD, arg(0), false)?,
                times: self.timevals(arg(1))?,
                follow: true,
            },
            libc::SYS_utime => Operation::Times {
                place: self.place(libc::AT_FDCWD, arg(0), false)?,
                times: self.utimbuf(arg(1))?,
                follow: true,
            },
            _ => return Err(libc::ENOSYS),
        };
        Ok(operation)
    }

    /// A NUL-terminated string of the caller's.
    fn string(&self, address: u64) -> Result<Vec<u8>, i32> {
        notify::read_string(self.tid, address)
    }

    /// The place `(dirfd, path)` names, as the kernel would resolve it for this caller.
    fn place(&self, dirfd: i32, address: u64, empty_allowed: bool) -> Result<Place, i32> {
        let path = self.string(address)?;
        if path.is_empty() {
            if empty_allowed && dirfd != libc::AT_FDCWD {
                return self.descriptor(dirfd);
            }
            return Err(libc::ENOENT);
        }
        if let Some(fd) = own_descriptor(&path) {
            return self.descriptor(fd);
        }
        // `/proc/self` would name the create thread's process: name the caller instead (which
        // the create thread's Landlock domain cannot reach, so anything there is refused).
        let path = if let Some(rest) = path.strip_prefix(b"/proc/self/") {
            [format!("/proc/{}/", self.tid).as_bytes(), rest].concat()
        } else if let Some(rest) = path.strip_prefix(b"/proc/thread-self/") {
            [format!("/proc/{0}/task/{0}/", self.tid).as_bytes(), rest].concat()
        } else {
            path
        };
        let path = PathBuf::from(OsStr::from_bytes(&path));
        if path.is_absolute() {
            return Ok(Place::Path(path));
        }
        let link = if dirfd == libc::AT_FDCWD {
            format!("/proc/{}/cwd", self.tid)
        } else {
            format!("/proc/{}/fd/{dirfd}", self.tid)
        };
        let base = std::fs::read_link(&link).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) if dirfd != libc::AT_FDCWD => libc::EBADF,
            Some(errno) => errno,
            None => libc::EACCES,
        })?;
        // A directory fd reads as an absolute path; anything else (a pipe, a deleted
        // directory) cannot be a base a name is created in.
        if !base.is_absolute() {
            return Err(libc::ENOTDIR);
        }
        if base.as_os_str().as_bytes().ends_with(b" (deleted)") {
            return Err(libc::ENOENT);
        }
        Ok(Place::Path(base.join(path)))
    }

    /// What `utimensat`/`futimesat` act on: with no path, the descriptor `dirfd` itself (then
    /// no flag is valid), as the kernel decides.
    fn times_place(&self, dirfd: i32, address: u64, flags: i32) -> Result<Place, i32> {
        if address != 0 || dirfd == libc::AT_FDCWD {
            return self.place(dirfd, address, flags & libc::AT_EMPTY_PATH != 0);
        }
        if flags != 0 {
            return Err(libc::EINVAL);
        }
        self.descriptor(dirfd)
    }

    /// The caller's `struct timespec[2]`, `None` for a null pointer ("now").
    fn timespecs(&self, address: u64) -> Result<Option<[libc::timespec; 2]>, i32> {
        Ok(self
            .words::<4>(address)?
            .map(|[a_sec, a_nsec, m_sec, m_nsec]| {
                [timespec(a_sec, a_nsec), timespec(m_sec, m_nsec)]
            }))
    }

    /// The caller's `struct timeval[2]`, `None` for a null pointer; microseconds out of range
    /// are `EINVAL`, as the kernel answers.
    fn timevals(&self, address: u64) -> Result<Option<[libc::timespec; 2]>, i32> {
        let Some([a_sec, a_usec, m_sec, m_usec]) = self.words::<4>(address)? else {
            return Ok(None);
        };
        if ![a_usec, m_usec]
            .iter()
            .all(|usec| (0..1_000_000).contains(usec))
        {
            return Err(libc::EINVAL);
        }
        Ok(Some([
            timespec(a_sec, a_usec * 1000),
            timespec(m_sec, m_usec * 1000),
        ]))
    }

    /// The caller's `struct utimbuf` (whole seconds), `None` for a null pointer.
    fn utimbuf(&self, address: u64) -> Result<Option<[libc::timespec; 2]>, i32> {
        Ok(self
            .words::<2>(address)?
            .map(|[access, modification]| [timespec(access, 0), timespec(modification, 0)]))
    }

    /// `N` 64-bit words of the caller's at `address`, `None` for a null pointer.
    fn words<const N: usize>(&self, address: u64) -> Result<Option<[i64; N]>, i32> {
        if address == 0 {
            return Ok(None);
        }
        let bytes = notify::read_memory(self.tid, address, N * 8).map_err(|_| libc::EFAULT)?;
        let mut words = [0i64; N];
        for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            *word = i64::from_ne_bytes(chunk.try_into().map_err(|_| libc::EFAULT)?);
        }
        Ok(Some(words))
    }

    fn descriptor(&self, fd: i32) -> Result<Place, i32> {
        notify::pidfd_getfd(self.pidfd, fd)
            .map(Place::Descriptor)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EBADF))
    }

    /// The caller's root directory (carrying its mount namespace).
    fn root(&self) -> Result<OwnedFd, i32> {
        open_path(
            libc::AT_FDCWD,
            &format!("/proc/{}/root", self.tid),
            libc::O_PATH | libc::O_DIRECTORY,
        )
    }

    fn umask(&self) -> Result<u32, i32> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.tid))
            .map_err(|_| libc::ESRCH)?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("Umask:"))
            .and_then(|value| u32::from_str_radix(value.trim(), 8).ok())
            .ok_or(libc::ESRCH)
    }
}

/// The descriptor number a path names when it is one of the caller's own: `/dev/stdin`,
/// `/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`, `/proc/thread-self/fd/N`.
fn own_descriptor(path: &[u8]) -> Option<i32> {
    match path {
        b"/dev/stdin" => return Some(0),
        b"/dev/stdout" => return Some(1),
        b"/dev/stderr" => return Some(2),
        _ => {}
    }
    let number = [
        &b"/dev/fd/"[..],
        b"/proc/self/fd/",
        b"/proc/thread-self/fd/",
    ]
    .iter()
    .find_map(|prefix| path.strip_prefix(*prefix))?;
    if number.is_empty() || !number.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(number).ok()?.parse().ok()
}

fn timespec(seconds: i64, nanoseconds: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: seconds,
        tv_nsec: nanoseconds,
    }
}

fn c_string(bytes: &[u8]) -> Result<CString, i32> {
    CString::new(bytes).map_err(|_| libc::EINVAL)
}

fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `openat(dirfd, path, flags | O_CLOEXEC)` (mode 0).
fn open_path(dirfd: RawFd, path: &str, flags: i32) -> Result<OwnedFd, i32> {
    let path = c_string(path.as_bytes())?;
    // SAFETY: `path` is NUL-terminated and alive for the call.
    let fd = unsafe { libc::openat(dirfd, path.as_ptr(), flags | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: the kernel just created this fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2` beneath `root`, as the caller would resolve `path`, without magic links.
pub(super) fn open_in_root(
    root: &OwnedFd,
    path: &Path,
    flags: i32,
    mode: u32,
) -> Result<OwnedFd, i32> {
    let c_path = c_string(path.as_os_str().as_bytes())?;
    // SAFETY: all-zero is a valid `open_how` (integers only).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = if flags & libc::O_CREAT != 0 {
        u64::from(mode)
    } else {
        0
    };
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // ELOOP is also the answer for a /proc magic link (`/proc/PID/root`, `/proc/self/cwd`):
    // followed here they would name this thread's process, outside the program's namespace, so
    // they are refused like any path the program may not take.
    // SAFETY: `c_path` is NUL-terminated and `how` a valid `open_how` of the size passed; both
    // outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c_path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(match last_errno() {
            libc::ELOOP => libc::EACCES,
            errno => errno,
        });
    }
    // SAFETY: the kernel just created this fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `/proc/thread-self/fd/N` of one of this thread's descriptors: reopening through it is
/// checked by Landlock against this thread's (the program's) rules.
fn own_fd_path(fd: &OwnedFd) -> String {
    format!("/proc/thread-self/fd/{}", fd.as_raw_fd())
}

/// A resolved final component: its directory and name, and the whole path.
struct Resolved {
    directory: OwnedFd,
    /// The last component, with a trailing `/` kept where the caller gave one.
    name: CString,
    /// The absolute path, as the caller sees it.
    path: PathBuf,
}

impl Resolved {
    /// Does the entry exist (not following a final symlink), and is it a directory / a FIFO?
    fn stat(&self) -> Option<libc::stat> {
        // SAFETY: all-zero is a valid `stat` buffer.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: directory fd, NUL-terminated name and a writable stat buffer, all alive.
        let rc = unsafe {
            libc::fstatat(
                self.directory.as_raw_fd(),
                self.name.as_ptr(),
                &mut stat,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        (rc == 0).then_some(stat)
    }

    fn is_dir(&self) -> bool {
        self.stat()
            .is_some_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR)
    }
}

/// Splits `path` into its directory and last component and opens the directory beneath the
/// caller's root; checks that the directory's name leads back to the same inode, so the
/// protected check sees the real location.
fn resolve(root: &OwnedFd, path: &Path) -> Result<Resolved, i32> {
    let bytes = path.as_os_str().as_bytes();
    let trimmed = {
        let mut end = bytes.len();
        while end > 1 && bytes[end - 1] == b'/' {
            end -= 1;
        }
        &bytes[..end]
    };
    let (directory, name) = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(0) => (&b"/"[..], &trimmed[1..]),
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => return Err(libc::ENOENT),
    };
    if name.is_empty() || name == b"." || name == b".." {
        return Err(libc::EEXIST);
    }
    let directory = open_in_root(
        root,
        Path::new(OsStr::from_bytes(directory)),
        libc::O_PATH | libc::O_DIRECTORY,
        0,
    )?;
    let located = std::fs::read_link(own_fd_path(&directory)).map_err(|_| libc::EACCES)?;
    if !located.is_absolute() || !same_inode(&directory, &located) {
        return Err(libc::EACCES);
    }
    let mut shown = name.to_vec();
    if trimmed.len() < bytes.len() {
        shown.push(b'/');
    }
    Ok(Resolved {
        directory,
        name: c_string(&shown)?,
        path: located.join(OsStr::from_bytes(name)),
    })
}

/// Does `path`, resolved beneath the caller's root, name the same inode as `fd`?
fn same_inode(fd: &OwnedFd, path: &Path) -> bool {
    let Ok(by_path) = std::fs::metadata(path) else {
        return false;
    };
    // SAFETY: all-zero is a valid `stat` buffer.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open fd and a writable stat buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
        return false;
    }
    use std::os::unix::fs::MetadataExt;
    by_path.dev() == stat.st_dev && by_path.ino() == stat.st_ino
}

/// Performs one request on the create thread.
fn perform(policy: &CreatePolicy, request: Request, reporter: Reporter) -> Performed {
    // SAFETY: plain syscall; this thread has its own umask (unshare(CLONE_FS) at start).
    unsafe { libc::umask(request.umask as libc::mode_t) };
    let refused = |path: &Path, rule: &str| {
        reporter.create_refused(
            request.tid,
            &format!(
                "{} is a {rule}: a new protected name is never created",
                path.display()
            ),
        );
    };
    let explained = |path: &Path, why: &str| {
        reporter.create_refused(request.tid, &format!("{}: {why}", path.display()));
    };
    let root = &request.root;
    let result = match request.operation {
        Operation::Open { place, flags, mode } => {
            let close_on_exec = flags & libc::O_CLOEXEC != 0;
            return match open(policy, root, place, flags, mode, &refused) {
                Ok(Opening::Ready(fd)) => Performed::Now(Outcome::Descriptor { fd, close_on_exec }),
                Ok(Opening::Waits(open)) => Performed::Waits {
                    open,
                    close_on_exec,
                },
                Ok(Opening::Checked(write)) => match root.try_clone() {
                    Ok(root) => Performed::Checked {
                        write,
                        root,
                        umask: request.umask,
                        close_on_exec,
                    },
                    Err(_) => Performed::Now(Outcome::Errno(libc::EMFILE)),
                },
                Err(errno) => Performed::Now(Outcome::Errno(errno)),
            };
        }
        Operation::Mkdir { place, mode } => make(policy, root, place, true, &refused, |at| {
            // SAFETY: directory fd and NUL-terminated name, alive for the call.
            unsafe { libc::mkdirat(at.directory.as_raw_fd(), at.name.as_ptr(), mode) }
        }),
        Operation::Mknod {
            place,
            mode,
            device,
        } => make(policy, root, place, false, &refused, |at| {
            // SAFETY: as above.
            unsafe {
                libc::mknodat(
                    at.directory.as_raw_fd(),
                    at.name.as_ptr(),
                    mode,
                    device as libc::dev_t,
                )
            }
        }),
        Operation::Symlink { target, place } => c_string(&target).and_then(|target| {
            make(policy, root, place, false, &refused, |at| {
                // SAFETY: NUL-terminated target and name, a directory fd, alive for the call.
                unsafe {
                    libc::symlinkat(target.as_ptr(), at.directory.as_raw_fd(), at.name.as_ptr())
                }
            })
        }),
        Operation::Link { old, new, flags } => link(policy, root, old, new, flags, &refused),
        Operation::Rename { old, new, flags } => {
            rename(policy, root, old, new, flags, &refused, &explained)
        }
        Operation::Unlink { place, flags } => unlink(policy, root, place, flags, &refused),
        Operation::Truncate { place, length } => {
            alter(
                policy,
                root,
                place,
                true,
                None,
                &refused,
                &explained,
                |target| {
                    let file = open_path(libc::AT_FDCWD, &own_fd_path(target), libc::O_WRONLY)?;
                    // SAFETY: an open fd; plain syscall.
                    if unsafe { libc::ftruncate(file.as_raw_fd(), length) } == 0 {
                        Ok(())
                    } else {
                        Err(last_errno())
                    }
                },
            )
        }
        Operation::Chown {
            place,
            uid,
            gid,
            follow,
        } => alter(
            policy,
            root,
            place,
            follow,
            None,
            &refused,
            &explained,
            |target| {
                // SAFETY: an open fd and an empty NUL-terminated path: the call acts on the file
                // the descriptor names (a symlink itself when it was opened without following).
                let rc = unsafe {
                    libc::fchownat(
                        target.as_raw_fd(),
                        c"".as_ptr(),
                        uid,
                        gid,
                        libc::AT_EMPTY_PATH,
                    )
                };
                if rc == 0 { Ok(()) } else { Err(last_errno()) }
            },
        ),
        Operation::Chmod { place, mode, flags } => {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            alter(
                policy,
                root,
                place,
                follow,
                Some(mode),
                &refused,
                &explained,
                |target| {
                    if !follow && is_symlink(target) {
                        // Linux has no mode for a symlink (fchmodat2 with AT_SYMLINK_NOFOLLOW
                        // says so).
                        return Err(libc::EOPNOTSUPP);
                    }
                    let path = c_string(own_fd_path(target).as_bytes())?;
                    // SAFETY: a NUL-terminated path alive for the call; chmod follows the magic
                    // link to the file the O_PATH descriptor names.
                    if unsafe { libc::chmod(path.as_ptr(), mode as libc::mode_t) } == 0 {
                        Ok(())
                    } else {
                        Err(last_errno())
                    }
                },
            )
        }
        Operation::Times {
            place,
            times,
            follow,
        } => alter(
            policy,
            root,
            place,
            follow,
            None,
            &refused,
            &explained,
            |target| {
                let path = c_string(own_fd_path(target).as_bytes())?;
                let times = times.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
                // SAFETY: a NUL-terminated path and a null or two-element `timespec` array, alive
                // for the call; the magic link leads to the file (or the symlink itself, when it
                // was opened without following) the O_PATH descriptor names.
                if unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times, 0) } == 0 {
                    Ok(())
                } else {
                    Err(last_errno())
                }
            },
        ),
    };
    Performed::Now(Outcome::Errno(match result {
        Ok(()) => 0,
        Err(errno) => errno,
    }))
}

fn place_path(place: Place) -> Result<PathBuf, i32> {
    match place {
        Place::Path(path) => Ok(path),
        // Only `open`, `linkat`'s old path reopen a descriptor; a new name needs a path.
        Place::Descriptor(_) => Err(libc::EEXIST),
    }
}

fn open(
    policy: &CreatePolicy,
    root: &OwnedFd,
    place: Place,
    flags: i32,
    mode: u32,
    refused: &dyn Fn(&Path, &str),
) -> Result<Opening, i32> {
    let writes = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
    // A protected file is never opened for writing, whatever name or link leads to it.
    let written_protected = |fd: &OwnedFd| -> Result<(), i32> {
        if !writes {
            return Ok(());
        }
        match std::fs::read_link(own_fd_path(fd)) {
            Ok(located) => match policy.protected(&located) {
                Some(rule) => {
                    refused_write(&located, &rule, refused);
                    Err(libc::EACCES)
                }
                None => Ok(()),
            },
            Err(_) => Err(libc::EACCES),
        }
    };
    let path = match place {
        // The caller's own descriptor exists: reopening it creates nothing.
        Place::Descriptor(fd) => {
            if flags & libc::O_EXCL != 0 {
                return Err(libc::EEXIST);
            }
            written_protected(&fd)?;
            return open_path(libc::AT_FDCWD, &own_fd_path(&fd), flags & !CREATING)
                .map(Opening::Ready);
        }
        Place::Path(path) => path,
    };
    let at = resolve(root, &path)?;
    if let Some(rule) = policy.protected(&at.path) {
        if at.stat().is_some() {
            if flags & libc::O_EXCL != 0 {
                return Err(libc::EEXIST);
            }
            if writes {
                refused_write(&at.path, &rule, refused);
                return Err(libc::EACCES);
            }
            // Exists and is only read: opens as the mounts and Landlock allow.
            return open_at(&at, flags & !CREATING, 0);
        }
        let creates_to_write =
            flags & libc::O_CREAT != 0 && flags & libc::O_ACCMODE == libc::O_WRONLY;
        if creates_to_write
            && let Some(kind) = policy.git_place(&at.path).and_then(GitPlace::checked_file)
        {
            return Ok(Opening::Checked(CheckedWrite { kind, at, mode }));
        }
        refused(&at.path, &rule);
        return Err(libc::EACCES);
    }
    match open_at(&at, flags | libc::O_NOFOLLOW, mode) {
        Err(libc::ELOOP) if flags & libc::O_NOFOLLOW == 0 => {
            // A symlink in the last place: open what it leads to, never create through it.
            if flags & libc::O_EXCL != 0 {
                return Err(libc::EEXIST);
            }
            let target = open_in_root(root, &at.path, libc::O_PATH, 0).map_err(|errno| {
                if errno == libc::ENOENT {
                    refused(&at.path, "dangling symlink");
                    libc::EACCES
                } else {
                    errno
                }
            })?;
            written_protected(&target)?;
            open_path(libc::AT_FDCWD, &own_fd_path(&target), flags & !CREATING).map(Opening::Ready)
        }
        other => other,
    }
}

/// An open that is done, or that must wait on a thread of its own: opening a FIFO waits for
/// the other end, which may come through this broker too; or the creation of a file whose
/// content is checked ([`CheckedFile`]).
enum Opening {
    Ready(OwnedFd),
    Waits(Box<dyn FnOnce() -> Result<OwnedFd, i32> + Send>),
    Checked(CheckedWrite),
}

/// A checked file the program creates: where, and the mode it asked for.
struct CheckedWrite {
    kind: CheckedFile,
    at: Resolved,
    mode: u32,
}

/// The largest content of a checked file the broker reads; more is refused (and drained, so
/// the writer never blocks).
const MAX_CHECKED_BYTES: usize = 4096;

/// A drain thread of a checked file, with a descriptor of its pipe's read end to see when the
/// program has closed its end.
struct Drain {
    hangup: OwnedFd,
    thread: std::thread::JoinHandle<()>,
}

/// Drains not yet joined: the create thread joins those whose writer has closed before it
/// performs the next request, so a brokered call made after the program closed a checked file
/// finds it in place (git reads `gitdir` and the gitlink right after writing them); the
/// launcher joins them before it exits.
static DRAINS: std::sync::Mutex<Vec<Drain>> = std::sync::Mutex::new(Vec::new());

/// Joins every drain whose pipe has no writer left (their file is then in place or refused).
pub(super) fn settle_checked_writes() {
    let mut drains = DRAINS.lock().unwrap_or_else(|e| e.into_inner());
    let (closed, open): (Vec<Drain>, Vec<Drain>) = drains.drain(..).partition(|drain| {
        let mut poll = libc::pollfd {
            fd: drain.hangup.as_raw_fd(),
            events: 0,
            revents: 0,
        };
        // SAFETY: one valid pollfd, timeout 0.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready != 0 && poll.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
    });
    *drains = open;
    drop(drains);
    for drain in closed {
        let _ = drain.thread.join();
    }
}

/// Starts a checked file: a pipe whose write end the program gets; a drain thread (confined as
/// this one, whose domain it inherits) reads the content to the end, checks it and creates the
/// file itself. A `commondir` is created at once with `../..`.
fn start_checked(
    waiting: &Arc<AtomicUsize>,
    policy: &Arc<CreatePolicy>,
    write: CheckedWrite,
    root: OwnedFd,
    umask: u32,
    tid: u32,
    reporter: Reporter,
) -> Result<OwnedFd, i32> {
    let mode = write.mode & !umask & 0o644;
    if waiting
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < MAX_WAITING_OPENS).then_some(n + 1)
        })
        .is_err()
    {
        return Err(libc::EAGAIN);
    }
    let release = || {
        waiting.fetch_sub(1, Ordering::AcqRel);
    };
    let mut ends = [0 as libc::c_int; 2];
    // SAFETY: a writable array of two ints.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        release();
        return Err(last_errno());
    }
    // SAFETY: the kernel just created both fds.
    let (read, sink) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    let hangup = match read.try_clone() {
        Ok(fd) => fd,
        Err(_) => {
            release();
            return Err(libc::EMFILE);
        }
    };
    if write.kind == CheckedFile::CommonDir
        && let Err(errno) = create_checked(&write.at, COMMON_DIR, mode)
    {
        release();
        return Err(errno);
    }
    let count = Arc::clone(waiting);
    let policy = Arc::clone(policy);
    let spawned = std::thread::Builder::new()
        .name("verbd-create-check".into())
        .spawn(move || {
            drain_checked(&policy, write, read, &root, mode, |why| {
                reporter.create_refused(tid, why);
            });
            count.fetch_sub(1, Ordering::AcqRel);
        });
    match spawned {
        Ok(thread) => {
            DRAINS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Drain { hangup, thread });
            Ok(sink)
        }
        Err(_) => {
            release();
            Err(libc::EAGAIN)
        }
    }
}

/// What git writes in a linked worktree's `commondir`: the repository it belongs to.
const COMMON_DIR: &[u8] = b"../..\n";

/// Reads what the program writes to a checked file, checks it, and creates the file (a
/// `commondir` only compares: it was made at the start).
fn drain_checked(
    policy: &CreatePolicy,
    write: CheckedWrite,
    read: OwnedFd,
    root: &OwnedFd,
    mode: u32,
    report: impl Fn(&str),
) {
    use std::io::Read;
    let mut content = Vec::new();
    let mut file = std::fs::File::from(read);
    let mut chunk = [0u8; 4096];
    let mut too_long = false;
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) if content.len() + n <= MAX_CHECKED_BYTES => {
                content.extend_from_slice(&chunk[..n]);
            }
            Ok(_) => too_long = true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                too_long = true;
                break;
            }
        }
    }
    let at = &write.at;
    let refuse = |why: &str| report(&format!("{}: refused: {why}", at.path.display()));
    let verdict = if too_long {
        Err(format!("more than {MAX_CHECKED_BYTES} bytes"))
    } else {
        check_content(policy, write.kind, at, root, &content)
    };
    match (write.kind, verdict) {
        (CheckedFile::CommonDir, Ok(())) => {}
        (CheckedFile::CommonDir, Err(why)) => {
            refuse(&format!("{why}; it holds `../..`, the repository itself"));
        }
        (_, Err(why)) => refuse(&format!("{why}; the file was not created")),
        (_, Ok(())) => {
            if let Err(errno) = create_checked(at, &content, mode) {
                refuse(&format!(
                    "cannot create it: {}",
                    io::Error::from_raw_os_error(errno)
                ));
            }
        }
    }
}

/// Is `content` what a checked file of `kind` may hold?
fn check_content(
    policy: &CreatePolicy,
    kind: CheckedFile,
    at: &Resolved,
    root: &OwnedFd,
    content: &[u8],
) -> Result<(), String> {
    // git strips the line's end when it reads these files.
    let line = content.strip_suffix(b"\n").unwrap_or(content);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() || line.iter().any(|&b| b == b'\n' || b == b'\r' || b == 0) {
        return Err("not one line".into());
    }
    match kind {
        CheckedFile::CommonDir => {
            if line == b"../.." {
                Ok(())
            } else {
                Err("a commondir other than `../..`".into())
            }
        }
        CheckedFile::WorktreeLocation => {
            if line.starts_with(b"/") && line.ends_with(b"/.git") {
                Ok(())
            } else {
                Err("a worktree location other than the absolute path of a `.git`".into())
            }
        }
        CheckedFile::Gitlink => {
            let Some(target) = line.strip_prefix(b"gitdir: ") else {
                return Err("a gitlink other than `gitdir: PATH`".into());
            };
            let target = Path::new(OsStr::from_bytes(target));
            let target = match at.path.parent() {
                Some(directory) if target.is_relative() => directory.join(target),
                _ => target.to_path_buf(),
            };
            let located = open_in_root(root, &target, libc::O_PATH | libc::O_DIRECTORY, 0)
                .ok()
                .and_then(|fd| std::fs::read_link(own_fd_path(&fd)).ok());
            match located {
                Some(located) if policy.is_gitlink_target(&located) => Ok(()),
                _ => Err(
                    "a gitlink to anything but a linked worktree's (`.git/worktrees/NAME`) or a submodule's (`.git/modules/NAME`) git directory in a write root"
                        .into(),
                ),
            }
        }
    }
}

/// Creates the checked file `at` names with `content` and `mode` (exclusively, not through a
/// symlink).
fn create_checked(at: &Resolved, content: &[u8], mode: u32) -> Result<(), i32> {
    use std::io::Write;
    // SAFETY: directory fd and NUL-terminated name, alive for the call.
    let fd = unsafe {
        libc::openat(
            at.directory.as_raw_fd(),
            at.name.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: the kernel just created this fd.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    use std::os::unix::fs::PermissionsExt;
    file.write_all(content)
        .and_then(|()| file.set_permissions(std::fs::Permissions::from_mode(mode)))
        .map_err(|_| libc::EIO)
}

/// `openat` of the resolved name (a FIFO's open is left to a thread, see [`Opening`]).
fn open_at(at: &Resolved, flags: i32, mode: u32) -> Result<Opening, i32> {
    let is_fifo = at
        .stat()
        .is_some_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFIFO);
    let run = move |directory: RawFd, name: &CString| {
        // SAFETY: directory fd and NUL-terminated name, alive for the call.
        let fd = unsafe {
            libc::openat(
                directory,
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            Err(last_errno())
        } else {
            // SAFETY: the kernel just created this fd.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }
    };
    if !is_fifo {
        return run(at.directory.as_raw_fd(), &at.name).map(Opening::Ready);
    }
    let directory = at.directory.try_clone().map_err(|_| libc::EMFILE)?;
    let name = at.name.clone();
    Ok(Opening::Waits(Box::new(move || {
        run(directory.as_raw_fd(), &name)
    })))
}

/// `mkdir`, `mknod`, `symlink`: a protected name answers `EEXIST` if it exists, else `EACCES`;
/// a directory git makes for a new repository (`.git`, `.git/hooks`, `.git/info`) is made.
fn make(
    policy: &CreatePolicy,
    root: &OwnedFd,
    place: Place,
    directory: bool,
    refused: &dyn Fn(&Path, &str),
    create: impl FnOnce(&Resolved) -> libc::c_int,
) -> Result<(), i32> {
    let at = resolve(root, &place_path(place)?)?;
    if let Some(rule) = policy.protected(&at.path) {
        if at.stat().is_some() {
            return Err(libc::EEXIST);
        }
        let git_directory = directory
            && policy
                .git_place(&at.path)
                .is_some_and(GitPlace::is_directory);
        if !git_directory {
            refused(&at.path, &rule);
            return Err(libc::EACCES);
        }
    }
    if create(&at) == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

fn link(
    policy: &CreatePolicy,
    root: &OwnedFd,
    old: Place,
    new: Place,
    flags: i32,
    refused: &dyn Fn(&Path, &str),
) -> Result<(), i32> {
    let new = resolve(root, &place_path(new)?)?;
    if let Some(rule) = policy.protected(&new.path) {
        if new.stat().is_some() {
            return Err(libc::EEXIST);
        }
        refused(&new.path, &rule);
        return Err(libc::EACCES);
    }
    let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
    // The file the new name will lead to, opened O_PATH: whatever name or link reached it, a
    // protected entry never gets a second name (through which it could be written).
    let source = match old {
        Place::Descriptor(fd) if flags & libc::AT_EMPTY_PATH != 0 => fd,
        // Without AT_SYMLINK_FOLLOW the kernel would link the /proc link itself: across devices.
        Place::Descriptor(_) if !follow => return Err(libc::EXDEV),
        Place::Descriptor(fd) => fd,
        Place::Path(path) => {
            let resolve_flags = if follow {
                libc::O_PATH
            } else {
                libc::O_PATH | libc::O_NOFOLLOW
            };
            open_in_root(root, &path, resolve_flags, 0)?
        }
    };
    let located = std::fs::read_link(own_fd_path(&source)).map_err(|_| libc::EACCES)?;
    if let Some(rule) = policy.protected(&located) {
        refused(&located, &rule);
        return Err(libc::EACCES);
    }
    // The O_PATH descriptor (or the caller's own) names the file itself: link it by its /proc
    // path, following that one magic link and nothing else.
    let source_path = c_string(own_fd_path(&source).as_bytes())?;
    // SAFETY: a NUL-terminated path, a directory fd and a NUL-terminated name, alive for the
    // call.
    let linked = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            source_path.as_ptr(),
            new.directory.as_raw_fd(),
            new.name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if linked == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// Reports a refused write, removal or mode change of a protected entry.
fn refused_write(path: &Path, rule: &str, refused: &dyn Fn(&Path, &str)) {
    refused(path, &format!("{rule}, kept unchanged"));
}

/// `unlink`, `rmdir`: never a protected entry, never a mount point of the program's namespace.
fn unlink(
    policy: &CreatePolicy,
    root: &OwnedFd,
    place: Place,
    flags: i32,
    refused: &dyn Fn(&Path, &str),
) -> Result<(), i32> {
    let Place::Path(path) = place else {
        return Err(libc::EACCES);
    };
    let at = resolve(root, &path)?;
    if let Some(rule) = policy.protected(&at.path) {
        let removes_a_directory = flags & libc::AT_REMOVEDIR != 0 && at.is_dir();
        if removes_a_directory && has_entries(&at) {
            // What the kernel answers, and nothing would change: git removes the empty
            // directories above a file it deleted, up to `.git`, and stops here.
            return Err(libc::ENOTEMPTY);
        }
        let place = policy.git_place(&at.path);
        // An empty directory git makes for a new repository holds nothing to keep.
        let empty_git_directory = removes_a_directory && place.is_some_and(GitPlace::is_directory);
        // A linked worktree's `commondir` and `gitdir`, a gitlink file (`git worktree remove`,
        // `prune`): without them git obeys nothing the agent wrote — the name comes back only
        // with checked content.
        let checked_file = flags & libc::AT_REMOVEDIR == 0
            && !at.is_dir()
            && place.and_then(GitPlace::checked_file).is_some();
        if !empty_git_directory && !checked_file {
            refused_write(&at.path, &rule, refused);
            return Err(libc::EACCES);
        }
    }
    if at
        .stat()
        .is_some_and(|s| policy.mount_points.contains(&(s.st_dev, s.st_ino)))
    {
        return Err(libc::EBUSY);
    }
    // SAFETY: directory fd and NUL-terminated name alive for the call.
    if unsafe { libc::unlinkat(at.directory.as_raw_fd(), at.name.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// Does the directory `at` names hold any entry? (Unreadable: taken as not empty.)
fn has_entries(at: &Resolved) -> bool {
    // SAFETY: directory fd and NUL-terminated name alive for the call.
    let fd = unsafe {
        libc::openat(
            at.directory.as_raw_fd(),
            at.name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return true;
    }
    // SAFETY: the kernel just created this fd.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    std::fs::read_dir(own_fd_path(&fd)).map_or(true, |mut entries| entries.next().is_some())
}

/// `truncate`, `chmod`, `chown`, `utimensat` and kin: the file they act on (following a final
/// symlink when `follow`), opened `O_PATH` beneath the caller's root, must lie in a write root
/// (Landlock governs none of these calls but `truncate`: outside, an owner could make its
/// `~/.ssh` world-writable or put back a time) and must not be protected; then `change` acts on
/// that descriptor. A descriptor that names no file (a pipe, a socket: its link is no path) is
/// in no directory tree and changes nothing another program reads.
#[allow(clippy::too_many_arguments)]
fn alter(
    policy: &CreatePolicy,
    root: &OwnedFd,
    place: Place,
    follow: bool,
    config_chmod: Option<u32>,
    refused: &dyn Fn(&Path, &str),
    explained: &dyn Fn(&Path, &str),
    change: impl FnOnce(&OwnedFd) -> Result<(), i32>,
) -> Result<(), i32> {
    let target = match place {
        Place::Descriptor(fd) => fd,
        Place::Path(path) => {
            let flags = if follow {
                libc::O_PATH
            } else {
                libc::O_PATH | libc::O_NOFOLLOW
            };
            open_in_root(root, &path, flags, 0)?
        }
    };
    let located = std::fs::read_link(own_fd_path(&target)).map_err(|_| libc::EACCES)?;
    if located.is_absolute() && !policy.in_write_root(&located) {
        explained(
            &located,
            "outside every write root: its mode, owner, times and size are kept unchanged",
        );
        return Err(libc::EACCES);
    }
    if let Some(rule) = policy.protected(&located) {
        // git probes whether the file system keeps the executable bit by flipping it on its
        // config (`git init`): a mode that lets no other uid write is harmless there.
        let harmless_config_mode = config_chmod.is_some_and(|mode| mode & 0o7022 == 0)
            && policy.git_place(&located) == Some(GitPlace::Config);
        if !harmless_config_mode {
            refused_write(&located, &rule, refused);
            return Err(libc::EACCES);
        }
    }
    change(&target)
}

/// Does the descriptor (an `O_PATH` one opened without following) name a symlink?
fn is_symlink(fd: &OwnedFd) -> bool {
    // SAFETY: all-zero is a valid `stat` buffer.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open fd and a writable stat buffer.
    unsafe {
        libc::fstat(fd.as_raw_fd(), &mut stat) == 0 && stat.st_mode & libc::S_IFMT == libc::S_IFLNK
    }
}

/// `rename`: refused when either name is protected, or when a directory would be moved to or
/// from a name that leads to protected entries (`.git`, `.config`).
fn rename(
    policy: &CreatePolicy,
    root: &OwnedFd,
    old: Place,
    new: Place,
    flags: u32,
    refused: &dyn Fn(&Path, &str),
    explained: &dyn Fn(&Path, &str),
) -> Result<(), i32> {
    let old = resolve(root, &place_path(old)?)?;
    let new = resolve(root, &place_path(new)?)?;
    if let Some(rule) = policy.protected(&old.path) {
        refused(&old.path, &rule);
        return Err(libc::EACCES);
    }
    if let Some(rule) = policy.protected(&new.path) {
        if flags == 0 && policy.git_place(&new.path) == Some(GitPlace::Config) {
            return replace_git_config(&old, &new, explained);
        }
        refused(&new.path, &rule);
        return Err(libc::EACCES);
    }
    for side in [&old, &new] {
        if side
            .stat()
            .is_some_and(|s| policy.mount_points.contains(&(s.st_dev, s.st_ino)))
        {
            return Err(libc::EBUSY);
        }
    }
    let moves_a_directory = old.is_dir() || (flags & libc::RENAME_EXCHANGE != 0 && new.is_dir());
    if moves_a_directory {
        for side in [&old, &new] {
            if policy.leads_to_protected(&side.path) {
                refused(&side.path, "name that leads to protected entries");
                return Err(libc::EACCES);
            }
        }
    }
    // SAFETY: directory fds and NUL-terminated names alive for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            old.directory.as_raw_fd(),
            old.name.as_ptr(),
            new.directory.as_raw_fd(),
            new.name.as_ptr(),
            flags,
        )
    };
    if rc == 0 { Ok(()) } else { Err(last_errno()) }
}

/// A rename onto a repository's `config` (`git config`, `git init`, `git clone` write the new
/// file as `config.lock` and rename it): the new content is read once, checked (module
/// `git_config`: only data keys added or changed), and written by this thread to a fresh file
/// it renames into place; the program's file is then removed, as the rename would have. The
/// program never holds a descriptor on what becomes the config, so it cannot change it after
/// the check (this thread performs one request at a time: the fresh file cannot be opened by
/// the program in between).
fn replace_git_config(
    old: &Resolved,
    new: &Resolved,
    refused: &dyn Fn(&Path, &str),
) -> Result<(), i32> {
    use std::io::{Read, Write};
    let refuse = |reason: String| {
        refused(&new.path, &reason);
        Err(libc::EACCES)
    };
    let read_regular = |at: &Resolved| -> Result<(Vec<u8>, u32), i32> {
        // SAFETY: directory fd and NUL-terminated name, alive for the call.
        let fd = unsafe {
            libc::openat(
                at.directory.as_raw_fd(),
                at.name.as_ptr(),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(last_errno());
        }
        // SAFETY: the kernel just created this fd.
        let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let meta = file.metadata().map_err(|_| libc::EIO)?;
        if !meta.is_file() || meta.len() > MAX_CONFIG_BYTES {
            return Err(libc::EACCES);
        }
        let mut bytes = Vec::new();
        Read::by_ref(&mut file)
            .take(MAX_CONFIG_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|_| libc::EIO)?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(libc::EACCES);
        }
        use std::os::unix::fs::PermissionsExt;
        Ok((bytes, meta.permissions().mode()))
    };
    let (content, mode) = match read_regular(old) {
        Ok(read) => read,
        Err(libc::ENOENT) => return Err(libc::ENOENT),
        Err(_) => {
            return refuse(
                "refused: a git config replacement that is not a regular file of at most 1 MiB"
                    .into(),
            );
        }
    };
    let existing = match new.stat() {
        None => Vec::new(),
        Some(_) => match read_regular(new) {
            Ok((bytes, _)) => bytes,
            Err(_) => return refuse("refused: a git config that is not a regular file".into()),
        },
    };
    if let Err(refusal) = super::git_config::check_replacement(&existing, &content) {
        return refuse(format!("refused: {refusal}; the config is kept unchanged"));
    }
    // A fresh name beside the config, made exclusively.
    let fresh_name =
        |n: u32| c_string(format!(".verbd-config-{}-{n}", std::process::id()).as_bytes());
    let mut attempt = 0;
    let (fresh, fresh_fd) = loop {
        let name = fresh_name(attempt)?;
        // SAFETY: directory fd and NUL-terminated name, alive for the call.
        let fd = unsafe {
            libc::openat(
                new.directory.as_raw_fd(),
                name.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd >= 0 {
            // SAFETY: the kernel just created this fd.
            break (name, unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let errno = last_errno();
        if errno != libc::EEXIST || attempt > 16 {
            return Err(errno);
        }
        attempt += 1;
    };
    let remove_fresh = || {
        // SAFETY: directory fd and NUL-terminated name, alive for the call.
        unsafe { libc::unlinkat(new.directory.as_raw_fd(), fresh.as_ptr(), 0) };
    };
    let mut file = std::fs::File::from(fresh_fd);
    let written = file.write_all(&content).and_then(|()| {
        use std::os::unix::fs::PermissionsExt;
        // No group or other write: the mode git gave its lock file, never wider.
        file.set_permissions(std::fs::Permissions::from_mode(mode & 0o755))
    });
    drop(file);
    if written.is_err() {
        remove_fresh();
        return Err(libc::EIO);
    }
    // SAFETY: directory fds and NUL-terminated names alive for the call.
    let renamed = unsafe {
        libc::renameat(
            new.directory.as_raw_fd(),
            fresh.as_ptr(),
            new.directory.as_raw_fd(),
            new.name.as_ptr(),
        )
    };
    if renamed != 0 {
        let errno = last_errno();
        remove_fresh();
        return Err(errno);
    }
    // SAFETY: directory fd and NUL-terminated name alive for the call.
    unsafe { libc::unlinkat(old.directory.as_raw_fd(), old.name.as_ptr(), 0) };
    Ok(())
}

/// Answers one notification: an errno, or a new descriptor installed in the caller.
fn answer(listener: &OwnedFd, id: u64, tid: u32, outcome: Outcome, reporter: Reporter) {
    match outcome {
        Outcome::Errno(errno) => notify::reply(listener, id, errno),
        Outcome::Descriptor { fd, close_on_exec } => {
            if let Err(errno) = notify::send_fd(listener, id, &fd, close_on_exec)
                && errno != libc::ENOENT
            {
                reporter.create_refused(tid, &format!("cannot hand over the descriptor: {errno}"));
                notify::reply(listener, id, errno);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_descriptors_are_recognised_and_nothing_else() {
        assert_eq!(own_descriptor(b"/dev/stdout"), Some(1));
        assert_eq!(own_descriptor(b"/dev/stderr"), Some(2));
        assert_eq!(own_descriptor(b"/dev/fd/63"), Some(63));
        assert_eq!(own_descriptor(b"/proc/self/fd/3"), Some(3));
        assert_eq!(own_descriptor(b"/proc/thread-self/fd/4"), Some(4));
        for other in [
            &b"/dev/fd/"[..],
            b"/dev/fd/3/x",
            b"/proc/self/fd/3x",
            b"/proc/self/root/CLAUDE.md",
            b"/dev/null",
            b"dev/stdout",
        ] {
            assert_eq!(own_descriptor(other), None, "{other:?}");
        }
    }

    #[test]
    fn protected_names_are_matched_inside_write_roots_only() {
        let policy = CreatePolicy {
            write_roots: vec![PathBuf::from("/work/project")],
            protected: ProtectedNames::builtin(),
            mount_points: Vec::new(),
            git_areas: Vec::new(),
        };
        for hit in [
            "/work/project/AGENTS.md",
            "/work/project/src/CLAUDE.md",
            "/work/project/.envrc",
            "/work/project/sub/.git",
            "/work/project/.git/hooks/post-checkout",
        ] {
            assert!(policy.protected(Path::new(hit)).is_some(), "{hit}");
        }
        for miss in [
            "/work/project/new.py",
            "/work/project/.git/index.lock",
            "/work/project/src/lib.rs",
            // Above the root: the root's own path never makes its entries protected.
            "/work/project",
        ] {
            assert!(policy.protected(Path::new(miss)).is_none(), "{miss}");
        }
        assert!(policy.leads_to_protected(Path::new("/work/project/sub/.git")));
        assert!(!policy.leads_to_protected(Path::new("/work/project/src")));
    }

    #[test]
    fn a_followed_git_directory_is_judged_as_in_a_write_root() {
        let area = |dir: &str, as_in_root: &str| GitArea {
            dir: PathBuf::from(dir),
            as_in_root: PathBuf::from(as_in_root),
        };
        let policy = CreatePolicy {
            write_roots: vec![PathBuf::from("/h/proj-agent")],
            protected: ProtectedNames::builtin(),
            mount_points: Vec::new(),
            git_areas: vec![
                area("/h/proj/.git/worktrees/a", ".git/worktrees/a"),
                area("/h/proj/.git/objects", ".git/objects"),
                area("/h/proj/.git/refs", ".git/refs"),
            ],
        };
        for data in [
            "/h/proj/.git/worktrees/a/index.lock",
            "/h/proj/.git/worktrees/a/HEAD",
            "/h/proj/.git/worktrees/a/logs/HEAD",
            "/h/proj/.git/worktrees/a/rebase-merge/git-rebase-todo",
            "/h/proj/.git/objects/ab/cdef",
            "/h/proj/.git/refs/heads/side.lock",
        ] {
            assert!(policy.in_write_root(Path::new(data)), "{data}");
            assert!(policy.protected(Path::new(data)).is_none(), "{data}");
        }
        for obeyed in [
            "/h/proj/.git/worktrees/a/commondir",
            "/h/proj/.git/worktrees/a/gitdir",
            "/h/proj/.git/worktrees/a/config.worktree",
            "/h/proj/.git/worktrees/a/config",
            "/h/proj/.git/worktrees/a/hooks/pre-commit",
            "/h/proj/.git/objects/x/.git/hooks/pre-commit",
        ] {
            assert!(policy.protected(Path::new(obeyed)).is_some(), "{obeyed}");
        }
        // The rest of the common directory is in no write root.
        for outside in [
            "/h/proj/.git/config",
            "/h/proj/.git/hooks/pre-commit",
            "/h/proj/a.txt",
        ] {
            assert!(!policy.in_write_root(Path::new(outside)), "{outside}");
        }
    }

    #[test]
    fn a_linked_worktrees_git_directory_is_data_but_what_git_obeys() {
        let policy = CreatePolicy {
            write_roots: vec![PathBuf::from("/w")],
            protected: ProtectedNames::builtin(),
            mount_points: Vec::new(),
            git_areas: Vec::new(),
        };
        let place = |p: &str| policy.git_place(Path::new(p));
        assert_eq!(
            place("/w/r/.git/worktrees"),
            Some(GitPlace::WorktreesDirectory)
        );
        assert_eq!(
            place("/w/r/.git/worktrees/x"),
            Some(GitPlace::WorktreeDirectory)
        );
        assert_eq!(
            place("/w/r/.git/worktrees/x/commondir"),
            Some(GitPlace::CommonDir)
        );
        assert_eq!(
            place("/w/r/.git/worktrees/x/gitdir"),
            Some(GitPlace::WorktreeLocation)
        );
        assert_eq!(
            place("/w/r/.git/worktrees/x/config.worktree"),
            Some(GitPlace::Config)
        );
        for data in [
            "/w/r/.git/worktrees/x/HEAD",
            "/w/r/.git/worktrees/x/index.lock",
            "/w/r/.git/worktrees/x/logs/HEAD",
            "/w/r/.git/worktrees/x/refs/bisect/bad",
            "/w/r/.git/worktrees/x/rebase-merge/done",
        ] {
            assert!(policy.protected(Path::new(data)).is_none(), "{data}");
        }
        for kept in [
            "/w/r/.git/worktrees/x/commondir",
            "/w/r/.git/worktrees/x/gitdir",
            "/w/r/.git/worktrees/x/config",
            "/w/r/.git/worktrees/x/config.worktree",
            "/w/r/.git/worktrees/x/hooks/pre-commit",
            "/w/r/.git/worktrees/x/info/attributes",
            "/w/r/.git/worktrees/x/modules/m/config",
            "/w/r/.git/modules/m/hooks/post-checkout",
        ] {
            assert!(policy.protected(Path::new(kept)).is_some(), "{kept}");
        }
        for target in ["/w/r/.git/worktrees/x", "/w/r/.git/modules/lib/deep"] {
            assert!(policy.is_gitlink_target(Path::new(target)), "{target}");
        }
        for other in [
            "/w/fake",
            "/w/r/.git",
            "/w/r/.git/worktrees",
            "/w/r/.git/modules",
            "/elsewhere/r/.git/worktrees/x",
        ] {
            assert!(!policy.is_gitlink_target(Path::new(other)), "{other}");
        }
    }
}
