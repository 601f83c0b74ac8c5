//! Memory hints: hand back to the kernel the pages the start-up, or the calls before a quiet
//! spell, touched.
//!
//! Each `verbd` process maps the whole binary (≈ 15 MiB) and its libraries, and every page it
//! ever touched stays in its resident set, 64 KiB around each fault (the kernel's fault-around).
//! The start-up — the dynamic loader, the policy compiler, the self-test, the argument parser —
//! touches megabytes of code and read-only data that serving a call never runs again, and the
//! calls themselves keep megabytes resident long after the last one (the daemon calls this
//! again after a quiet spell, `server::idle`).
//! [`release_clean_pages`] unmaps, from this process only, every page of a read-only private
//! file mapping that holds nothing but the file's own bytes, and returns free heap to the kernel.
//! The pages stay in the page cache; a page the process needs again comes back on its next access
//! (a minor fault, no I/O while it is cached), so what stays resident afterwards is what the
//! process really uses.
//!
//! Invariants:
//! - only mappings that are file-backed, private, not writable and hold no anonymous page are
//!   released: `MADV_DONTNEED` on them drops nothing but page-table entries of pages whose content
//!   is the file's, so every later read sees the same bytes. A writable mapping, or a read-only
//!   one with a copied page (RELRO after the loader's relocations), is never touched: there the
//!   drop would lose the copy;
//! - a mapping found that way stays mapped until the madvise: verbd never unmaps a file mapping
//!   (no file `mmap`, no `dlclose`; glibc never unloads the NSS modules it loads), so the range is
//!   still the one read from `/proc/self/smaps`;
//! - the hint changes what is resident, never what the process computes: a failure is returned
//!   and the caller goes on.

use std::io;
use std::ops::Range;

/// What [`release_clean_pages`] handed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// Mappings whose resident pages were dropped.
    pub mappings: usize,
    /// Their resident size before the drop, in KiB.
    pub kib: u64,
}

/// Drops this process's resident pages of clean read-only file mappings (module docs), then
/// returns free heap to the kernel (`malloc_trim`).
pub fn release_clean_pages() -> io::Result<Released> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut released = Released {
        mappings: 0,
        kib: 0,
    };
    for (range, kib) in releasable(&smaps) {
        // SAFETY: `range` is a whole mapping of this process that is private, not writable and
        // holds no anonymous page (see `releasable`), and it stays mapped (module invariants):
        // MADV_DONTNEED only removes page-table entries whose pages are the file's unchanged
        // bytes, which the next access maps again from the page cache or the file.
        let done = unsafe {
            libc::madvise(
                range.start as *mut libc::c_void,
                range.end - range.start,
                libc::MADV_DONTNEED,
            )
        };
        if done != 0 {
            return Err(io::Error::last_os_error());
        }
        released.mappings += 1;
        released.kib += kib;
    }
    // SAFETY: malloc_trim only returns free memory of the allocator's arenas to the kernel; it
    // frees nothing in use and takes the allocator's own locks.
    unsafe { libc::malloc_trim(0) };
    Ok(released)
}

/// The mappings of an `smaps` text that [`release_clean_pages`] may drop, with their resident
/// size in KiB: file-backed, private, not writable, resident, and no anonymous page. A mapping
/// whose `Rss` or `Anonymous` line is missing is left alone.
fn releasable(smaps: &str) -> Vec<(Range<usize>, u64)> {
    struct Mapping {
        range: Range<usize>,
        eligible: bool,
        rss: Option<u64>,
        anonymous: Option<u64>,
    }
    let mut mappings: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some(name) = first.strip_suffix(':') {
            let Some(mapping) = mappings.last_mut() else {
                continue;
            };
            let kib = fields.next().and_then(|value| value.parse().ok());
            match name {
                "Rss" => mapping.rss = kib,
                "Anonymous" => mapping.anonymous = kib,
                _ => {}
            }
            continue;
        }
        // A mapping's header: `start-end perms offset dev inode [path]`.
        let Some((start, end)) = first.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        let perms = fields.next().unwrap_or("").as_bytes();
        let inode = fields.nth(2).unwrap_or("0");
        let path = fields.next().unwrap_or("");
        let eligible = perms.len() == 4
            && perms[1] == b'-'
            && perms[3] == b'p'
            && inode != "0"
            && path.starts_with('/');
        mappings.push(Mapping {
            range: start..end,
            eligible,
            rss: None,
            anonymous: None,
        });
    }
    mappings
        .into_iter()
        .filter_map(|m| match (m.eligible, m.rss, m.anonymous) {
            (true, Some(rss), Some(0)) if rss > 0 && m.range.start < m.range.end => {
                Some((m.range, rss))
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An excerpt of a real daemon's smaps (fields cut to the ones read, plus one other).
    const SMAPS: &str = "\
55cb5fdaf000-55cb60040000 r--p 00000000 fe:00 10010882                   /usr/bin/verbd
Size:               2628 kB
Rss:                 960 kB
Anonymous:             0 kB
55cb60040000-55cb60c69000 r-xp 00290000 fe:00 10010882                   /usr/bin/verbd
Rss:                6372 kB
Anonymous:             0 kB
55cb60c69000-55cb60cc8000 r--p 00eb8000 fe:00 10010882                   /usr/bin/verbd
Rss:                 380 kB
Anonymous:           376 kB
55cb60cc8000-55cb60ccb000 rw-p 00f16000 fe:00 10010882                   /usr/bin/verbd
Rss:                  12 kB
Anonymous:             0 kB
55cb9782b000-55cb97992000 rw-p 00000000 00:00 0                          [heap]
Rss:                1224 kB
Anonymous:          1224 kB
7f0bcf5fb000-7f0bcf602000 r--p 00000000 fe:00 15695876                   /usr/lib/x86_64-linux-gnu/libnss_systemd.so.2
Rss:                   0 kB
Anonymous:             0 kB
7f0bcfe84000-7f0bcffda000 r-xp 00026000 fe:00 326279                     /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                1240 kB
Anonymous:             0 kB
7f0bd0151000-7f0bd0153000 r-xp 00000000 00:00 0                          [vdso]
Rss:                   4 kB
Anonymous:             0 kB
7f0bd0160000-7f0bd0170000 r--s 00000000 fe:00 4242                       /dev/shm/shared
Rss:                  64 kB
Anonymous:             0 kB
7f0bd0170000-7f0bd0180000 r-xp 00000000 fe:00 4243                       /opt/no-anonymous-line
Rss:                  64 kB
";

    #[test]
    fn only_clean_read_only_private_file_mappings_are_released() {
        assert_eq!(
            releasable(SMAPS),
            vec![
                (0x55cb5fdaf000..0x55cb60040000, 960),
                (0x55cb60040000..0x55cb60c69000, 6372),
                (0x7f0bcfe84000..0x7f0bcffda000, 1240),
            ]
        );
    }

    /// The relocated read-only data (a table of `&str`, which the loader fixes up at start)
    /// reads the same after the release: a copied page is never dropped.
    #[test]
    fn relocated_data_survives_the_release() {
        static WORDS: [&str; 3] = ["relocated", "read-only", "data"];
        let read = || -> Vec<String> {
            std::hint::black_box(&WORDS)
                .iter()
                .map(|w| w.to_string())
                .collect()
        };
        let before = read();
        let released = release_clean_pages().expect("release");
        assert!(released.mappings > 0, "{released:?}");
        assert_eq!(read(), before);
    }
}
