//! Pure text filters: the downstream stages of a pipeline the agent can run itself, without any
//! privilege, on a verb's output.
//!
//! A stage is a pure filter only when it reads nothing but its stdin and writes nothing but its
//! stdout: no file operands, no options that open files (`grep -f`, `sort -o`, `jq --rawfile`),
//! no recursion (`grep -r`), no program that can run commands (`sed` `e`/`w`, `awk` `system`,
//! `sort --compress-program`). Anything else answers `Err(why)`: an agent that ran
//! `… | grep -r secret /root` was not filtering output.
#![forbid(unsafe_code)]

/// `Ok(())` when `argv` is a pure text filter of its stdin; otherwise why not.
pub fn check(argv: &[String]) -> Result<(), String> {
    let Some(program) = argv.first() else {
        return Err("empty command".into());
    };
    let name = program.rsplit('/').next().unwrap_or(program);
    let args = &argv[1..];
    match name {
        "grep" | "egrep" | "fgrep" => grep(args),
        "awk" | "gawk" | "mawk" => awk(args),
        "sed" => sed(args),
        "jq" => jq(args),
        "head" | "tail" => options_only(
            name,
            args,
            &[
                "-q", "-v", "--quiet", "--silent", "-f", "-F", "--follow", "-z",
            ],
            &["-n", "-c", "--lines", "--bytes"],
            true,
        ),
        "wc" => options_only(
            name,
            args,
            &[
                "-l", "-c", "-w", "-m", "-L", "--lines", "--bytes", "--words", "--chars",
            ],
            &[],
            false,
        ),
        "sort" => options_only(
            name,
            args,
            &[
                "-n",
                "-r",
                "-u",
                "-h",
                "-V",
                "-f",
                "-b",
                "-s",
                "-g",
                "-M",
                "-R",
                "-z",
                "--numeric-sort",
                "--reverse",
                "--unique",
                "--human-numeric-sort",
                "--version-sort",
                "--ignore-case",
                "--stable",
            ],
            &["-k", "-t", "--key", "--field-separator"],
            false,
        ),
        "uniq" => options_only(
            name,
            args,
            &[
                "-c",
                "-d",
                "-u",
                "-i",
                "-z",
                "--count",
                "--repeated",
                "--unique",
                "--ignore-case",
            ],
            &[
                "-f",
                "-s",
                "-w",
                "--skip-fields",
                "--skip-chars",
                "--check-chars",
            ],
            false,
        ),
        "cut" => options_only(
            name,
            args,
            &["-s", "--complement", "--only-delimited", "-z"],
            &[
                "-d",
                "-f",
                "-c",
                "-b",
                "--delimiter",
                "--fields",
                "--characters",
                "--bytes",
                "--output-delimiter",
            ],
            false,
        ),
        "tr" => {
            // Operands of tr are character sets, never files.
            if args.iter().any(|a| {
                a.starts_with("--")
                    && !matches!(
                        a.as_str(),
                        "--delete" | "--squeeze-repeats" | "--complement"
                    )
            }) {
                Err("tr with an unknown long option".into())
            } else {
                Ok(())
            }
        }
        "column" => options_only(
            name,
            args,
            &["-t", "-n", "-x", "-c"],
            &["-s", "-o", "-N"],
            false,
        ),
        "cat" | "tac" | "rev" | "nl" | "fold" | "less" | "more" | "base64" | "md5sum"
        | "sha256sum" | "sha1sum" | "expand" | "unexpand" | "fmt" | "strings" | "od" | "xxd"
        | "hexdump" => {
            if let Some(operand) = args
                .iter()
                .find(|a| !a.starts_with('-') || a.as_str() == "-")
                && operand != "-"
            {
                Err(format!(
                    "`{name}` reads the file {operand:?}, not only its input"
                ))
            } else if name == "xxd" && args.iter().any(|a| a == "-r") {
                Err("xxd -r writes binary".into())
            } else {
                Ok(())
            }
        }
        _ => Err(format!("`{name}` is not a pure text filter")),
    }
}

/// Only the listed flags and valued options; `numeric_shorthand` admits `-20` (head/tail).
fn options_only(
    name: &str,
    args: &[String],
    flags: &[&str],
    valued: &[&str],
    numeric_shorthand: bool,
) -> Result<(), String> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let numeric = numeric_shorthand
            && a.len() > 1
            && a.starts_with(['-', '+'])
            && a[1..].bytes().all(|b| b.is_ascii_digit());
        if numeric || flags.contains(&a) {
            i += 1;
        } else if valued.contains(&a) {
            i += 2;
        } else if let Some(opt) = valued.iter().find(|v| {
            a.starts_with(**v)
                && (a.len() > v.len())
                && (v.len() == 2 || a.as_bytes()[v.len()] == b'=')
        }) {
            let _ = opt;
            i += 1;
        } else if a.starts_with('-')
            && a.len() > 2
            && !a.starts_with("--")
            && a[1..]
                .chars()
                .all(|c| flags.contains(&format!("-{c}").as_str()))
        {
            // Bundled short flags: `sort -rn`, `uniq -ci`.
            i += 1;
        } else if a.starts_with('-') {
            return Err(format!(
                "`{name} {a}` is not known to be a pure filter option"
            ));
        } else {
            return Err(format!("`{name}` reads the file {a:?}, not only its input"));
        }
    }
    Ok(())
}

fn grep(args: &[String]) -> Result<(), String> {
    let mut pattern_given = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--" {
            let rest = &args[i + 1..];
            let operands = rest.len() - usize::from(!pattern_given && !rest.is_empty());
            return if operands == 0 {
                Ok(())
            } else {
                Err("grep is given files to read".into())
            };
        }
        if matches!(a, "-e" | "--regexp") {
            pattern_given = true;
            i += 2;
            continue;
        }
        if a.starts_with("--regexp=") {
            pattern_given = true;
            i += 1;
            continue;
        }
        if matches!(a, "-A" | "-B" | "-C" | "-m" | "--max-count" | "--label") {
            i += 2;
            continue;
        }
        if a.starts_with("--") {
            let allowed = [
                "--ignore-case",
                "--invert-match",
                "--count",
                "--line-number",
                "--extended-regexp",
                "--fixed-strings",
                "--word-regexp",
                "--line-regexp",
                "--only-matching",
                "--quiet",
                "--silent",
                "--no-filename",
                "--with-filename",
                "--color",
                "--colour",
                "--color=never",
                "--color=always",
                "--color=auto",
                "--perl-regexp",
                "--text",
                "--max-count",
                "--after-context",
                "--before-context",
                "--context",
                "--line-buffered",
            ];
            let head = a.split('=').next().unwrap_or(a);
            if allowed.contains(&a) || allowed.contains(&head) {
                i += 1;
                continue;
            }
            return Err(format!(
                "`grep {a}` is not known to be a pure filter option"
            ));
        }
        if a.starts_with('-') && a.len() > 1 {
            for (j, c) in a[1..].char_indices() {
                match c {
                    'i' | 'v' | 'c' | 'n' | 'E' | 'F' | 'w' | 'x' | 'o' | 'q' | 's' | 'h' | 'H'
                    | 'P' | 'a' | 'I' | 'z' | 'G' => {}
                    'A' | 'B' | 'C' | 'm' => {
                        if j + 2 == a.len() {
                            i += 1;
                        }
                        break;
                    }
                    'e' => {
                        pattern_given = true;
                        if j + 2 == a.len() {
                            i += 1;
                        }
                        break;
                    }
                    '0'..='9' => {}
                    'r' | 'R' | 'd' | 'D' => {
                        return Err("grep -r/-d reads directories, not only its input".into());
                    }
                    'f' => return Err("grep -f reads patterns from a file".into()),
                    other => {
                        return Err(format!(
                            "`grep -{other}` is not known to be a pure filter option"
                        ));
                    }
                }
            }
            i += 1;
            continue;
        }
        if !pattern_given {
            pattern_given = true;
            i += 1;
            continue;
        }
        return Err(format!("grep reads the file {a:?}, not only its input"));
    }
    Ok(())
}

fn awk(args: &[String]) -> Result<(), String> {
    let mut program: Option<&str> = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if matches!(a, "-F" | "-v") {
            i += 2;
            continue;
        }
        if (a.starts_with("-F") || a.starts_with("-v")) && a.len() > 2 {
            i += 1;
            continue;
        }
        if a == "-f" || a.starts_with("--") || (a.starts_with('-') && a.len() > 1) {
            return Err(format!("`awk {a}` is not known to be a pure filter option"));
        }
        if program.is_none() {
            program = Some(a);
            i += 1;
            continue;
        }
        if a.contains('=') && !a.starts_with('/') {
            i += 1; // var=value operand
            continue;
        }
        return Err(format!("awk reads the file {a:?}, not only its input"));
    }
    let program = program.ok_or("awk without a program")?;
    for forbidden in [
        "system", "getline", "|", ">>", "close(", "fflush", "ENVIRON",
    ] {
        if program.contains(forbidden) {
            return Err(format!(
                "the awk program uses `{forbidden}`, which runs commands or touches files"
            ));
        }
    }
    // `print > "file"`: a `>` after print/printf in the same statement.
    for statement in program.split([';', '{', '}', '\n']) {
        let s = statement.trim_start();
        if (s.starts_with("print") || s.starts_with("printf")) && s.contains('>') {
            return Err("the awk program writes to a file (print > …)".into());
        }
    }
    Ok(())
}

fn sed(args: &[String]) -> Result<(), String> {
    let mut scripts = Vec::new();
    let mut quiet = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-n" | "--quiet" | "--silent" => quiet = true,
            "-E" | "-r" | "--regexp-extended" | "-u" | "-z" => {}
            "-e" | "--expression" => {
                scripts.push(args.get(i + 1).ok_or("sed -e without a script")?.as_str());
                i += 1;
            }
            "-ne" | "-nE" | "-En" => quiet = true,
            _ if a.starts_with("-i") || a.starts_with("--in-place") => {
                return Err("sed -i edits files in place".into());
            }
            _ if a.starts_with('-') && a.len() > 1 => {
                return Err(format!("`sed {a}` is not known to be a pure filter option"));
            }
            _ if scripts.is_empty() => scripts.push(a),
            _ => return Err(format!("sed reads the file {a:?}, not only its input")),
        }
        i += 1;
    }
    let _ = quiet;
    for script in scripts {
        sed_script(script)?;
    }
    Ok(())
}

/// Admit only sed commands that print, delete, quit and substitute (without the `e`/`w` flags).
fn sed_script(script: &str) -> Result<(), String> {
    let chars: Vec<char> = script.chars().collect();
    let mut i = 0;
    let bad = |c: char| Err(format!("sed command `{c}` runs commands or touches files"));
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\n' | ';' | '{' | '}' | '!' | ',' | '$' | '0'..='9' | '~' | '+' => i += 1,
            '/' | '\\' => {
                // An address regex: /re/ or \cREc.
                let delim = if c == '\\' {
                    i += 1;
                    *chars.get(i).ok_or("sed: unterminated address")?
                } else {
                    '/'
                };
                i = skip_delimited(&chars, i + 1, delim)?;
                while matches!(chars.get(i), Some('I' | 'M')) {
                    i += 1;
                }
            }
            'p' | 'd' | 'D' | 'P' | 'q' | 'Q' | '=' | 'l' | 'n' | 'N' | 'g' | 'G' | 'h' | 'H'
            | 'x' | 'z' => i += 1,
            's' | 'y' => {
                let delim = *chars.get(i + 1).ok_or("sed: unterminated s command")?;
                if delim == '\n' || delim == '\\' {
                    return Err("sed: unusual s delimiter".into());
                }
                i = skip_delimited(&chars, i + 2, delim)?;
                i = skip_delimited(&chars, i, delim)?;
                if c == 's' {
                    while let Some(&f) = chars.get(i) {
                        match f {
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' | '0'..='9' => i += 1,
                            'e' | 'w' | 'W' => return bad(f),
                            _ => break,
                        }
                    }
                }
            }
            other => return bad(other),
        }
    }
    Ok(())
}

/// Index just past the next unescaped `delim` from `start`.
fn skip_delimited(chars: &[char], start: usize, delim: char) -> Result<usize, String> {
    let mut i = start;
    while i < chars.len() {
        if chars[i] == '\\' {
            i += 2;
            continue;
        }
        if chars[i] == delim {
            return Ok(i + 1);
        }
        i += 1;
    }
    Err("sed: unterminated expression".into())
}

fn jq(args: &[String]) -> Result<(), String> {
    let mut filter_seen = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-r"
            | "-c"
            | "-s"
            | "-e"
            | "-S"
            | "-M"
            | "-C"
            | "-j"
            | "-a"
            | "-n"
            | "--raw-output"
            | "--compact-output"
            | "--slurp"
            | "--exit-status"
            | "--sort-keys"
            | "--tab"
            | "--monochrome-output"
            | "--join-output"
            | "--ascii-output"
            | "--null-input"
            | "-rc"
            | "-cr"
            | "-er"
            | "-re" => i += 1,
            "--arg" | "--argjson" => i += 3,
            "--indent" => i += 2,
            "-f" | "--from-file" | "--rawfile" | "--slurpfile" | "-L" => {
                return Err(format!("`jq {a}` reads a file"));
            }
            _ if a.starts_with('-') && a.len() > 1 => {
                return Err(format!("`jq {a}` is not known to be a pure filter option"));
            }
            _ if !filter_seen => {
                if a.contains("input_filename") || a.contains("$__loc__") || a.contains("env") {
                    return Err("the jq program reads the environment or file names".into());
                }
                filter_seen = true;
                i += 1;
            }
            _ => return Err(format!("jq reads the file {a:?}, not only its input")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<String> {
        shell_words::split(line).unwrap()
    }

    #[test]
    fn common_filters_pass() {
        for ok in [
            "grep -i error",
            "grep -E 'a|b' -A 3",
            "grep -v -e foo -e bar",
            "tail -n 50",
            "tail -20",
            "head -5",
            "wc -l",
            "sort -rn",
            "sort -k2 -t,",
            "uniq -c",
            "cut -d: -f1",
            "awk '{print $1}'",
            "awk -F: '$3 > 1000 {print $1}'",
            "sed -n '1,20p'",
            "sed 's/foo/bar/g'",
            "jq -r '.items[].metadata.name'",
            "column -t",
            "tr -d '\\r'",
        ] {
            assert_eq!(check(&argv(ok)), Ok(()), "{ok}");
        }
    }

    #[test]
    fn file_reads_writes_and_commands_are_refused() {
        for bad in [
            "grep -r password /root",
            "grep secret /etc/shadow",
            "grep -f /etc/patterns",
            "sort -o /etc/passwd",
            "awk '{system(\"id\")}'",
            "awk '{print > \"/tmp/x\"}'",
            "awk '{print $1}' /etc/shadow",
            "sed -i s/a/b/ /etc/hosts",
            "sed 's/a/b/e'",
            "sed 'w /tmp/out'",
            "sed '1e id'",
            "jq --rawfile x /etc/shadow .",
            "jq . /root/secrets.json",
            "tail /var/log/auth.log",
            "cat /etc/shadow",
            "tee /etc/cron.d/x",
            "xargs kill",
            "sh -c id",
        ] {
            assert!(check(&argv(bad)).is_err(), "{bad}");
        }
    }
}
