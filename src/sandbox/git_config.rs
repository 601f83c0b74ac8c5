//! The git config check of `verbd exec`'s create broker: a repository's `config` (and
//! `config.worktree`) may be replaced by the program only with a file whose every added or
//! changed key is a **data key** of [`DATA_KEYS`] — what `git init`, `git clone`, `git remote
//! add`, `git branch --set-upstream-to` and `git config user.name …` write. Everything else is
//! refused, naming the key: keys that run a command or redirect git (`core.fsmonitor`,
//! `core.hooksPath`, `core.pager`, `core.editor`, `core.sshCommand`, `core.worktree`, `alias.*`,
//! `filter.*`, `diff.*.textconv`, `merge.*.driver`, `credential.*`, `include.path`,
//! `includeIf.*.path`, …) and any key not listed (default deny).
//!
//! Parsing follows git's own syntax (config.c): comments (`#`, `;`), sections `[section]`,
//! subsections `[section "sub"]` (case kept, `\"` and `\\` escapes) and the old `[section.sub]`
//! (lower-cased), keys (a letter, then letters, digits, `-`; case folded) with or without a
//! value, values with quotes, escapes (`\n`, `\t`, `\b`, `\\`, `\"`), continuation lines and
//! trailing comments, a key on the same line as its section header, a byte-order mark. Anything
//! this parser does not read exactly as git would — a NUL byte, a lone carriage return, an
//! escape git rejects, a key outside a section — is refused as a whole: the check never guesses.
//!
//! Invariants: a key that was in the old file with the same value (as many times) passes, so a
//! human's own settings never block the program's `git config user.email …`; removed keys pass
//! (removing a setting runs nothing); values of data keys that name a transport that runs a
//! command (`ext::`, `fd::`) or start with `-` are refused.
#![forbid(unsafe_code)]

/// One key of a config file: section and name lower-case, subsection as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub section: String,
    pub subsection: Option<String>,
    pub name: String,
    /// `None` for a bare key (boolean true).
    pub value: Option<Vec<u8>>,
}

impl ConfigEntry {
    /// `section.sub.name` as git shows it.
    pub fn key(&self) -> String {
        match &self.subsection {
            Some(sub) => format!("{}.{sub}.{}", self.section, self.name),
            None => format!("{}.{}", self.section, self.name),
        }
    }
}

/// Why a config file is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigRefusal {
    #[error("git config line {line}: {reason} (a file git might read differently is refused)")]
    Syntax { line: usize, reason: &'static str },
    #[error(
        "git config key `{key}` is not a data key `verbd exec` lets a program set (docs/policy.md lists them: keys that run commands or redirect git stay the human's)"
    )]
    NotData { key: String },
    #[error(
        "git config key `{key}`: value {value:?} names a transport that runs a command or an option"
    )]
    RunsCommand { key: String, value: String },
}

/// The data keys: `section.name`, or `section.*.name` for any subsection.
pub const DATA_KEYS: &[&str] = &[
    // `git init`, `git clone`.
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.symlinks",
    "core.ignorecase",
    "core.precomposeunicode",
    "extensions.objectformat",
    "extensions.worktreeconfig",
    // Who commits.
    "user.name",
    "user.email",
    // `git remote add`, `git clone`, `git fetch` settings.
    "remote.*.url",
    "remote.*.pushurl",
    "remote.*.fetch",
    "remote.*.tagopt",
    "remote.*.prune",
    "remote.*.mirror",
    // `git branch --set-upstream-to`, `git push -u`, `git clone`.
    "branch.*.remote",
    "branch.*.merge",
    // How `git pull` and `git push` integrate (git's own hints suggest setting them).
    "pull.rebase",
    "pull.ff",
    "push.default",
    "push.autosetupremote",
    "init.defaultbranch",
];

/// Data keys whose value is a URL git may connect to.
const URL_KEYS: &[&str] = &["remote.*.url", "remote.*.pushurl"];

fn pattern_matches(pattern: &str, entry: &ConfigEntry) -> bool {
    let parts: Vec<&str> = pattern.split('.').collect();
    match (parts.as_slice(), &entry.subsection) {
        ([section, name], None) => *section == entry.section && *name == entry.name,
        ([section, "*", name], Some(_)) => *section == entry.section && *name == entry.name,
        _ => false,
    }
}

/// Checks that `new` adds or changes only data keys relative to `old` (empty for a new file).
pub fn check_replacement(old: &[u8], new: &[u8]) -> Result<(), ConfigRefusal> {
    let new = parse(new)?;
    // An old file git could not read either contributes nothing: every key is judged as new.
    let mut old = parse(old).unwrap_or_default();
    for entry in new {
        if let Some(at) = old.iter().position(|known| *known == entry) {
            old.swap_remove(at);
            continue;
        }
        if !DATA_KEYS.iter().any(|p| pattern_matches(p, &entry)) {
            return Err(ConfigRefusal::NotData { key: entry.key() });
        }
        if URL_KEYS.iter().any(|p| pattern_matches(p, &entry)) {
            let value = entry.value.as_deref().unwrap_or_default();
            let lower = String::from_utf8_lossy(value).to_ascii_lowercase();
            if lower.starts_with("ext::") || lower.starts_with("fd::") || lower.starts_with('-') {
                return Err(ConfigRefusal::RunsCommand {
                    key: entry.key(),
                    value: String::from_utf8_lossy(value).into_owned(),
                });
            }
        }
    }
    Ok(())
}

/// Reads a config file as git does (see the module docs), or refuses it.
pub fn parse(text: &[u8]) -> Result<Vec<ConfigEntry>, ConfigRefusal> {
    Parser {
        text: text.strip_prefix(b"\xef\xbb\xbf").unwrap_or(text),
        at: 0,
        line: 1,
    }
    .entries()
}

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
    line: usize,
}

/// End of file reads as a newline, as in git.
const END: u8 = b'\n';

impl Parser<'_> {
    fn refuse<T>(&self, reason: &'static str) -> Result<T, ConfigRefusal> {
        Err(ConfigRefusal::Syntax {
            line: self.line,
            reason,
        })
    }

    /// The next byte (`\r\n` as `\n`), or `None` at the end.
    fn next(&mut self) -> Result<Option<u8>, ConfigRefusal> {
        let Some(&c) = self.text.get(self.at) else {
            return Ok(None);
        };
        self.at += 1;
        match c {
            0 => self.refuse("a NUL byte"),
            b'\r' if self.text.get(self.at) == Some(&b'\n') => {
                self.at += 1;
                self.line += 1;
                Ok(Some(b'\n'))
            }
            b'\r' => self.refuse("a carriage return not followed by a newline"),
            b'\n' => {
                self.line += 1;
                Ok(Some(b'\n'))
            }
            c => Ok(Some(c)),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn skip_comment(&mut self) -> Result<(), ConfigRefusal> {
        while let Some(c) = self.next()? {
            if c == b'\n' {
                break;
            }
        }
        Ok(())
    }

    fn entries(mut self) -> Result<Vec<ConfigEntry>, ConfigRefusal> {
        let mut entries = Vec::new();
        let mut section: Option<(String, Option<String>)> = None;
        while let Some(c) = self.next()? {
            match c {
                b'\n' | b' ' | b'\t' | 0x0b | 0x0c => {}
                b'#' | b';' => self.skip_comment()?,
                b'[' => section = Some(self.section_header()?),
                c if c.is_ascii_alphabetic() => {
                    let Some((name, sub)) = &section else {
                        return self.refuse("a key before any section");
                    };
                    let (key, value) = self.key_and_value(c)?;
                    entries.push(ConfigEntry {
                        section: name.clone(),
                        subsection: sub.clone(),
                        name: key,
                        value,
                    });
                }
                _ => return self.refuse("a character that starts neither a key nor a section"),
            }
        }
        Ok(entries)
    }

    fn section_header(&mut self) -> Result<(String, Option<String>), ConfigRefusal> {
        let mut name = String::new();
        loop {
            match self.next()? {
                Some(c) if c.is_ascii_alphanumeric() || c == b'-' || c == b'.' => {
                    name.push(char::from(c.to_ascii_lowercase()));
                }
                Some(b']') => {
                    if name.is_empty() || name.starts_with('.') || name.ends_with('.') {
                        return self.refuse("an empty section name");
                    }
                    // `[section.sub]`: the old form, the subsection lower-cased.
                    return Ok(match name.split_once('.') {
                        Some((section, sub)) => (section.to_string(), Some(sub.to_string())),
                        None => (name, None),
                    });
                }
                Some(b' ' | b'\t') if !name.is_empty() && !name.contains('.') => {
                    return self.quoted_subsection(name);
                }
                _ => return self.refuse("a section header git does not read"),
            }
        }
    }

    fn quoted_subsection(
        &mut self,
        name: String,
    ) -> Result<(String, Option<String>), ConfigRefusal> {
        loop {
            match self.next()? {
                Some(b' ' | b'\t') => {}
                Some(b'"') => break,
                _ => return self.refuse("a subsection without quotes"),
            }
        }
        let mut sub = Vec::new();
        loop {
            match self.next()? {
                Some(b'"') => break,
                Some(b'\\') => match self.next()? {
                    Some(b'\n') | None => return self.refuse("a newline in a subsection"),
                    Some(c) => sub.push(c),
                },
                Some(b'\n') | None => return self.refuse("a newline in a subsection"),
                Some(c) => sub.push(c),
            }
        }
        if self.next()? != Some(b']') {
            return self.refuse("text between a subsection and `]`");
        }
        match String::from_utf8(sub) {
            Ok(sub) => Ok((name, Some(sub))),
            Err(_) => self.refuse("a subsection that is not UTF-8"),
        }
    }

    fn key_and_value(&mut self, first: u8) -> Result<(String, Option<Vec<u8>>), ConfigRefusal> {
        let mut key = String::from(char::from(first.to_ascii_lowercase()));
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == b'-' {
                self.at += 1;
                key.push(char::from(c.to_ascii_lowercase()));
            } else {
                break;
            }
        }
        loop {
            match self.next()?.unwrap_or(END) {
                b' ' | b'\t' => {}
                b'\n' => return Ok((key, None)),
                b'=' => return Ok((key, Some(self.value()?))),
                _ => return self.refuse("a key followed by neither `=` nor the end of the line"),
            }
        }
    }

    fn value(&mut self) -> Result<Vec<u8>, ConfigRefusal> {
        let mut value = Vec::new();
        let mut quoted = false;
        let mut comment = false;
        let mut spaces = 0usize;
        loop {
            let c = self.next()?.unwrap_or(END);
            if c == b'\n' {
                if quoted {
                    return self.refuse("an unterminated quote");
                }
                return Ok(value);
            }
            if comment {
                continue;
            }
            if !quoted {
                if c == b';' || c == b'#' {
                    comment = true;
                    continue;
                }
                if matches!(c, b' ' | b'\t' | 0x0b | 0x0c) {
                    if !value.is_empty() {
                        spaces += 1;
                    }
                    continue;
                }
            }
            value.extend(std::iter::repeat_n(b' ', spaces));
            spaces = 0;
            match c {
                b'\\' => match self.next()?.unwrap_or(END) {
                    b'\n' => {}
                    b't' => value.push(b'\t'),
                    b'b' => value.push(0x08),
                    b'n' => value.push(b'\n'),
                    b'\\' => value.push(b'\\'),
                    b'"' => value.push(b'"'),
                    _ => return self.refuse("an escape git does not read"),
                },
                b'"' => quoted = !quoted,
                c => value.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Vec<(String, Option<String>)> {
        parse(text.as_bytes())
            .unwrap()
            .into_iter()
            .map(|e| {
                let key = e.key();
                (key, e.value.map(|v| String::from_utf8(v).unwrap()))
            })
            .collect()
    }

    #[test]
    fn reads_git_syntax_as_git_does() {
        let text = "\u{feff}# comment\n[core]\n\trepositoryformatversion = 0\n\tBare\n\
            [remote \"Origin\"]\n\turl = \"/srv/a b\" ; trailing\n\tfetch = +refs/heads/*:\\\n\
            refs/remotes/origin/*\n[Branch.Main] remote=origin\n[user] name = A  \"  B\"  # c\r\n";
        assert_eq!(
            keys(text),
            vec![
                ("core.repositoryformatversion".into(), Some("0".into())),
                ("core.bare".into(), None),
                ("remote.Origin.url".into(), Some("/srv/a b".into())),
                (
                    "remote.Origin.fetch".into(),
                    Some("+refs/heads/*:refs/remotes/origin/*".into())
                ),
                ("branch.main.remote".into(), Some("origin".into())),
                ("user.name".into(), Some("A    B".into())),
            ]
        );
    }

    #[test]
    fn what_git_would_read_differently_is_refused() {
        for text in [
            "key = x\n",
            "[core\n",
            "[core \"x]\n",
            "[core \"a\nb\"]\n",
            "[core] x = \"open\n",
            "[core] x = a\\qb\n",
            "[core] x = a\0b\n",
            "[core] x = a\rb\n",
            "[core] 1x = a\n",
            "[core] x y = a\n",
            "[] x = 1\n",
            "[core.x \"y\"]\n",
        ] {
            assert!(
                matches!(parse(text.as_bytes()), Err(ConfigRefusal::Syntax { .. })),
                "{text:?}"
            );
        }
    }

    #[test]
    fn only_data_keys_may_be_added_or_changed() {
        let init = b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n";
        assert_eq!(check_replacement(b"", init), Ok(()));
        let clone = [
            &init[..],
            b"[remote \"origin\"]\n\turl = /srv/repo\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n[user]\n\tname = Agent\n",
        ]
        .concat();
        assert_eq!(check_replacement(init, &clone), Ok(()));
        for (planted, key) in [
            ("[core]\n\tfsmonitor = /tmp/x\n", "core.fsmonitor"),
            ("[CORE] FSMonitor = /tmp/x\n", "core.fsmonitor"),
            ("[core]\n\thooksPath = /tmp/h\n", "core.hookspath"),
            ("[core]\n\tworktree = /tmp\n", "core.worktree"),
            ("[core]\n\tpager = sh -c x\n", "core.pager"),
            ("[include]\n\tpath = ../x\n", "include.path"),
            (
                "[includeIf \"gitdir:/\"]\n\tpath = x\n",
                "includeif.gitdir:/.path",
            ),
            ("[alias]\n\tst = !sh\n", "alias.st"),
            ("[filter \"x\"]\n\tclean = sh\n", "filter.x.clean"),
            ("[diff \"x\"]\n\ttextconv = sh\n", "diff.x.textconv"),
            ("[remote \"o\"]\n\tuploadpack = sh\n", "remote.o.uploadpack"),
            ("[submodule \"s\"]\n\tupdate = !sh\n", "submodule.s.update"),
            ("[core.x]\n\tsshcommand = sh\n", "core.x.sshcommand"),
            ("[core] sharedRepository = 0777\n", "core.sharedrepository"),
        ] {
            let new = [&init[..], planted.as_bytes()].concat();
            assert_eq!(
                check_replacement(init, &new),
                Err(ConfigRefusal::NotData { key: key.into() }),
                "{planted:?}"
            );
        }
        let ext = [&init[..], b"[remote \"o\"]\n\turl = ext::sh -c x\n"].concat();
        assert!(matches!(
            check_replacement(init, &ext),
            Err(ConfigRefusal::RunsCommand { .. })
        ));
        // A human's own settings stay, whatever they are; removing them is fine.
        let human = [&init[..], b"[core]\n\tfsmonitor = /usr/bin/watchman\n"].concat();
        let with_email = [&human[..], b"[user]\n\temail = a@b\n"].concat();
        assert_eq!(check_replacement(&human, &with_email), Ok(()));
        assert_eq!(check_replacement(&human, init), Ok(()));
        // Changing the value of a human's non-data key is adding one.
        let changed = [&init[..], b"[core]\n\tfsmonitor = /tmp/evil\n"].concat();
        assert!(check_replacement(&human, &changed).is_err());
    }
}
