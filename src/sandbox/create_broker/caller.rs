//! The calling thread of one notification: its syscall decoded into an [`Operation`], with the
//! path strings copied out of its memory and made absolute in its view of the file system (its
//! root, working directory or directory descriptor, as the kernel names them).

use super::paths::{open_path, own_descriptor, timespec};
use super::*;

/// The calling thread of one notification.
pub(super) struct Caller<'a> {
    pub(super) tid: u32,
    pub(super) pidfd: &'a OwnedFd,
}

impl Caller<'_> {
    pub(super) fn operation(&self, data: &libc::seccomp_data) -> Result<Operation, i32> {
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
    pub(super) fn string(&self, address: u64) -> Result<Vec<u8>, i32> {
        notify::read_string(self.tid, address)
    }

    /// The place `(dirfd, path)` names, as the kernel would resolve it for this caller.
    pub(super) fn place(
        &self,
        dirfd: i32,
        address: u64,
        empty_allowed: bool,
    ) -> Result<Place, i32> {
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
    pub(super) fn times_place(&self, dirfd: i32, address: u64, flags: i32) -> Result<Place, i32> {
        if address != 0 || dirfd == libc::AT_FDCWD {
            return self.place(dirfd, address, flags & libc::AT_EMPTY_PATH != 0);
        }
        if flags != 0 {
            return Err(libc::EINVAL);
        }
        self.descriptor(dirfd)
    }

    /// The caller's `struct timespec[2]`, `None` for a null pointer ("now").
    pub(super) fn timespecs(&self, address: u64) -> Result<Option<[libc::timespec; 2]>, i32> {
        Ok(self
            .words::<4>(address)?
            .map(|[a_sec, a_nsec, m_sec, m_nsec]| {
                [timespec(a_sec, a_nsec), timespec(m_sec, m_nsec)]
            }))
    }

    /// The caller's `struct timeval[2]`, `None` for a null pointer; microseconds out of range
    /// are `EINVAL`, as the kernel answers.
    pub(super) fn timevals(&self, address: u64) -> Result<Option<[libc::timespec; 2]>, i32> {
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
    pub(super) fn utimbuf(&self, address: u64) -> Result<Option<[libc::timespec; 2]>, i32> {
        Ok(self
            .words::<2>(address)?
            .map(|[access, modification]| [timespec(access, 0), timespec(modification, 0)]))
    }

    /// `N` 64-bit words of the caller's at `address`, `None` for a null pointer.
    pub(super) fn words<const N: usize>(&self, address: u64) -> Result<Option<[i64; N]>, i32> {
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

    pub(super) fn descriptor(&self, fd: i32) -> Result<Place, i32> {
        notify::pidfd_getfd(self.pidfd, fd)
            .map(Place::Descriptor)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EBADF))
    }

    /// The caller's root directory (carrying its mount namespace).
    pub(super) fn root(&self) -> Result<OwnedFd, i32> {
        open_path(
            libc::AT_FDCWD,
            &format!("/proc/{}/root", self.tid),
            libc::O_PATH | libc::O_DIRECTORY,
        )
    }

    pub(super) fn umask(&self) -> Result<u32, i32> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.tid))
            .map_err(|_| libc::ESRCH)?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("Umask:"))
            .and_then(|value| u32::from_str_radix(value.trim(), 8).ok())
            .ok_or(libc::ESRCH)
    }
}
