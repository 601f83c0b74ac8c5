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

mod caller;
mod git_files;
mod paths;
mod perform;

use caller::Caller;
pub(super) use git_files::settle_checked_writes;
use git_files::{CheckedWrite, start_checked};
pub(super) use paths::open_in_root;
use perform::perform;

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
mod tests;
