//! What a recorded command does to the world, judged from its argv alone: read-only, mutating,
//! destructive, reading credentials, or unknown.
//!
//! Used two ways: `coverage` flags loudly any destructive or credential-reading command a verb
//! would run *without* approval, and `suggest` picks a conservative category (only what is
//! positively known to be read-only is `read-only`). The tables cover the programs of an ops
//! agent (systemd, journald, kubectl, helm, docker/containerd, psql, nginx, ip/ss, git, files
//! and processes); a program not in them is `Unknown`, never assumed safe.
#![forbid(unsafe_code)]

/// The judgement, most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Effect {
    Destructive,
    CredentialRead,
    Mutating,
    Unknown,
    ReadOnly,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Destructive => "destructive",
            Effect::CredentialRead => "credential-read",
            Effect::Mutating => "mutating",
            Effect::Unknown => "unknown",
            Effect::ReadOnly => "read-only",
        }
    }

    /// Must never run without a human's approval.
    pub fn is_dangerous(self) -> bool {
        matches!(self, Effect::Destructive | Effect::CredentialRead)
    }
}

/// The effect of `argv` and why. A command that runs code an argument names (see
/// [`runs_code`]) is never `read-only`.
pub fn classify(argv: &[String]) -> (Effect, String) {
    let Some(program) = argv.first() else {
        return (Effect::Unknown, "empty command".into());
    };
    let name = program.rsplit('/').next().unwrap_or(program).to_string();
    let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    if let Some(path) = args.iter().find(|a| is_credential_path(a)) {
        let effect = match by_program(&name, &args).0 {
            Effect::Destructive => Effect::Destructive,
            _ => Effect::CredentialRead,
        };
        return (effect, format!("touches credential material ({path})"));
    }
    let judged = by_program(&name, &args);
    match option_exec(&name, &args) {
        Some(why) if judged.0 == Effect::ReadOnly => (Effect::Unknown, why),
        Some(why) => (judged.0, why),
        None => judged,
    }
}

/// Programs that run whatever code or command they are given: shells, interpreters, privilege
/// and namespace switchers, remote shells, editors (`:!`), and exec wrappers.
const RUNS_ANY_CODE: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "fish",
    "csh",
    "tcsh",
    "python",
    "python3",
    "perl",
    "ruby",
    "node",
    "php",
    "lua",
    "tclsh",
    "su",
    "sudo",
    "doas",
    "pkexec",
    "runuser",
    "xargs",
    "nsenter",
    "chroot",
    "unshare",
    "ssh",
    "socat",
    "nc",
    "ncat",
    "vim",
    "vi",
    "nvim",
    "view",
    "vimdiff",
    "ex",
    "rvim",
    "nano",
    "emacs",
    "ed",
    "busybox",
    "env",
    "nohup",
    "setsid",
    "stdbuf",
    "chrt",
    "taskset",
    "ionice",
    "flock",
    "strace",
    "ltrace",
    "gdb",
    "script",
    "systemd-run",
    "parallel",
    "watch",
    "timeout",
    "nice",
    "time",
    "expect",
];

/// Why `argv` would run code its arguments name — the program is a shell, an interpreter or
/// an exec wrapper, or one of its options takes a command (`tar --checkpoint-action=exec=`,
/// `zip -TT`, `git -c`, `awk 'BEGIN{system(…)}'`, …) — or `None`. `policy suggest` never drafts
/// such a command as a verb: a verb's caller would choose the code.
pub fn runs_code(argv: &[String]) -> Option<String> {
    let program = argv.first()?;
    let name = program.rsplit('/').next().unwrap_or(program);
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    if RUNS_ANY_CODE.contains(&name) || RUNS_ANY_CODE.contains(&stem) {
        return Some(format!("`{name}` runs arbitrary code or opens a shell"));
    }
    let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    option_exec(name, &args)
}

/// A short-option cluster (`-xIf`, not `--long`) that holds `letter`.
fn short_cluster_has(arg: &str, letter: char) -> bool {
    arg.starts_with('-') && !arg.starts_with("--") && arg[1..].contains(letter)
}

/// The option of `name` that runs (or writes for later running) a command its value names.
fn option_exec(name: &str, args: &[&str]) -> Option<String> {
    let runs = |arg: &str, what: &str| Some(format!("`{arg}`: {name} {what}"));
    let starts = |arg: &str, options: &[&str]| {
        options
            .iter()
            .any(|o| arg == *o || arg.starts_with(&format!("{o}=")))
    };
    match name {
        "tar" | "gtar" | "bsdtar" => {
            for (i, arg) in args.iter().enumerate() {
                if starts(
                    arg,
                    &[
                        "--checkpoint-action",
                        "--to-command",
                        "--use-compress-program",
                        "--info-script",
                        "--new-volume-script",
                        "--rsh-command",
                    ],
                ) || short_cluster_has(arg, 'I')
                    || short_cluster_has(arg, 'F')
                    || (i == 0 && !arg.starts_with('-') && arg.contains(['I', 'F']))
                {
                    return runs(arg, "runs the command this option names");
                }
            }
            None
        }
        "zip" => args
            .iter()
            .find(|a| a.starts_with("-TT") || starts(a, &["--unzip-command"]))
            .and_then(|a| runs(a, "runs the command this option names to test the archive")),
        "tcpdump" => args
            .iter()
            .find(|a| a.starts_with("-z") || short_cluster_has(a, 'z'))
            .and_then(|a| runs(a, "runs the command this option names on each saved file")),
        "rsync" => args
            .iter()
            .find(|a| starts(a, &["--rsh", "--rsync-path"]) || short_cluster_has(a, 'e'))
            .and_then(|a| runs(a, "runs the remote shell or program this option names")),
        "git" => {
            let mut global = true;
            let mut skip_value = false;
            for arg in args {
                if skip_value {
                    skip_value = false;
                    continue;
                }
                if starts(arg, &["--upload-pack", "--receive-pack", "--exec"]) {
                    return runs(arg, "runs the program this option names");
                }
                if global {
                    if *arg == "-c" || arg.starts_with("-c") && arg.len() > 2 {
                        return runs(
                            arg,
                            "takes configuration that names programs to run (core.pager, core.sshCommand, aliases)",
                        );
                    }
                    if starts(arg, &["--config-env"]) {
                        return runs(arg, "takes configuration that names programs to run");
                    }
                    if matches!(*arg, "-C" | "--git-dir" | "--work-tree" | "--namespace") {
                        skip_value = true;
                    } else if !arg.starts_with('-') {
                        global = false;
                    }
                } else if *arg == "-u" {
                    return runs(arg, "runs the upload-pack program this option names");
                }
            }
            None
        }
        "find" => args
            .iter()
            .find(|a| {
                matches!(
                    **a,
                    "-exec"
                        | "-execdir"
                        | "-ok"
                        | "-okdir"
                        | "-fprint"
                        | "-fprint0"
                        | "-fprintf"
                        | "-fls"
                )
            })
            .and_then(|a| {
                runs(
                    a,
                    "runs a command, or writes a file it names (which a shell may run later)",
                )
            }),
        "less" | "more" | "most" | "zless" => args
            .iter()
            .find(|a| {
                a.starts_with('+')
                    || starts(
                        a,
                        &[
                            "--lesskey-file",
                            "--lesskey-src",
                            "--log-file",
                            "--LOG-FILE",
                        ],
                    )
                    || short_cluster_has(a, 'k')
                    || short_cluster_has(a, 'o')
                    || short_cluster_has(a, 'O')
            })
            .and_then(|a| {
                runs(
                    a,
                    "runs pager commands (`!` runs a shell) or writes the file this option names",
                )
            }),
        "scp" | "sftp" | "rsh" => {
            for (i, arg) in args.iter().enumerate() {
                let option = if *arg == "-o" {
                    args.get(i + 1).copied().unwrap_or("")
                } else {
                    arg.strip_prefix("-o").unwrap_or_default()
                };
                let key = option
                    .split(['=', ' '])
                    .next()
                    .unwrap_or("")
                    .to_ascii_lowercase();
                if matches!(
                    key.as_str(),
                    "proxycommand"
                        | "localcommand"
                        | "permitlocalcommand"
                        | "knownhostscommand"
                        | "match"
                ) {
                    return runs(
                        &format!("-o {option}"),
                        "runs the command this option names",
                    );
                }
                if matches!(*arg, "-S" | "-F" | "-D") || arg.starts_with("-S") {
                    return runs(
                        arg,
                        "runs the program or reads the ssh configuration this option names",
                    );
                }
            }
            None
        }
        "awk" | "gawk" | "mawk" | "nawk" => {
            if let Some(a) = args.iter().find(|a| {
                starts(a, &["--file", "--exec", "--load", "--include", "--source"])
                    || matches!(**a, "-f" | "-E" | "-l" | "-i" | "-e")
            }) {
                return runs(a, "reads program text or extensions this option names");
            }
            args.iter().find_map(|a| {
                awk_runs(a).and_then(|what| {
                    runs(what, "runs commands or writes files from its program text")
                })
            })
        }
        "sed" | "gsed" => {
            if args.contains(&"--sandbox") {
                return None;
            }
            let mut scripts: Vec<&str> = Vec::new();
            let mut i = 0;
            let mut explicit = false;
            while i < args.len() {
                let a = args[i];
                if a == "-e" || a == "--expression" {
                    scripts.extend(args.get(i + 1));
                    explicit = true;
                    i += 2;
                    continue;
                }
                if let Some(rest) = a.strip_prefix("--expression=") {
                    scripts.push(rest);
                    explicit = true;
                } else if a == "-f" || a.starts_with("--file") || short_cluster_has(a, 'f') {
                    return runs(
                        a,
                        "reads a script (which may run commands) from the file this option names",
                    );
                } else if !a.starts_with('-') && !explicit {
                    scripts.push(a);
                    explicit = true;
                }
                i += 1;
            }
            scripts
                .into_iter()
                .find_map(sed_runs)
                .and_then(|what| runs(what, "script runs a command (`e`) or writes a file (`w`)"))
        }
        _ => None,
    }
}

/// The part of an awk program that runs a command or writes a file: `system(`, a pipe to or
/// from a command (`|`), `print … > file`.
fn awk_runs(program: &str) -> Option<&'static str> {
    if program.contains("system") {
        return Some("system(");
    }
    if program.contains('|') {
        return Some("|");
    }
    for statement in program.split([';', '}', '\n']) {
        if let Some(at) = statement.find("print")
            && statement[at..].contains('>')
        {
            return Some("print >");
        }
    }
    None
}

/// The command of a sed script that runs a command or writes a file: `e`, `w`/`W`, or an `s`
/// command with the `e` or `w` flag.
fn sed_runs(script: &str) -> Option<&'static str> {
    let chars: Vec<char> = script.chars().collect();
    let mut i = 0;
    // Skip a delimited part starting at chars[i] == delimiter; returns the index after its end.
    let skip_delimited = |mut i: usize, delimiter: char| -> usize {
        i += 1;
        while i < chars.len() && chars[i] != delimiter {
            if chars[i] == '\\' {
                i += 1;
            }
            i += 1;
        }
        i + 1
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\n' | ';' | '{' | '}' | '!' | ',' | '$' | '~' | '+' | '0'..='9' => i += 1,
            '/' => i = skip_delimited(i, '/'),
            '\\' => {
                let delimiter = chars.get(i + 1).copied().unwrap_or('/');
                i = skip_delimited(i + 1, delimiter);
            }
            'e' => return Some("e"),
            'w' | 'W' => return Some("w"),
            's' | 'y' => {
                let &delimiter = chars.get(i + 1)?;
                i = skip_delimited(i + 1, delimiter);
                i = skip_delimited(i - 1, delimiter);
                if c == 's' {
                    while i < chars.len() && !matches!(chars[i], ';' | '\n' | '}') {
                        match chars[i] {
                            'e' => return Some("s///e"),
                            'w' | 'W' => return Some("s///w"),
                            _ => i += 1,
                        }
                    }
                }
            }
            'a' | 'i' | 'c' | ':' | 'b' | 't' | 'T' | 'r' | 'R' | 'q' | 'Q' | 'l' | 'L' | 'v' => {
                // Text or a label to the end of the command.
                while i < chars.len() && !matches!(chars[i], ';' | '\n') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// Paths that hold secrets: private keys, password hashes, kubeconfigs, cloud and database
/// credentials, process environments.
pub fn is_credential_path(arg: &str) -> bool {
    let a = arg.trim_start_matches(['-', '=']);
    let a = a.rsplit_once('=').map_or(a, |(_, v)| v);
    let lower = a.to_ascii_lowercase();
    const EXACT_OR_PREFIX: &[&str] = &[
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/sudoers",
        "/etc/ssl/private",
        "/etc/kubernetes/admin.conf",
        "/etc/kubernetes/pki",
        "/etc/kubernetes/kubelet.conf",
        "/etc/rancher/k3s/k3s.yaml",
        "/run/secrets",
        "/var/run/secrets",
        "/etc/letsencrypt/live",
        "/etc/letsencrypt/archive",
        "/root/.ssh",
        "/etc/verbd/secrets",
        "/etc/ssh/ssh_host_",
    ];
    const ANYWHERE: &[&str] = &[
        "/.ssh/",
        "/.kube/config",
        "/.pgpass",
        "/.aws/credentials",
        "/.docker/config.json",
        "/.netrc",
        "/.git-credentials",
        "/.vault-token",
        "/environ",
        "id_rsa",
        "id_ed25519",
        "id_ecdsa",
        "privkey",
        ".key",
        "secret",
        "credentials",
        "token",
        "password",
        ".p12",
        ".pfx",
        ".env",
    ];
    EXACT_OR_PREFIX.iter().any(|p| lower.starts_with(p))
        || (lower.contains('/') || lower.starts_with('.') || lower.ends_with(".key"))
            && ANYWHERE.iter().any(|p| lower.contains(p))
        || lower == ".pgpass"
        || lower == ".env"
}

fn sub(args: &[&str]) -> Vec<String> {
    // Positional words (subcommands), skipping options and the values of common valued options.
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
            continue;
        }
        if matches!(
            *a,
            "-n" | "--namespace"
                | "-u"
                | "-o"
                | "--output"
                | "-l"
                | "--selector"
                | "--context"
                | "-c"
                | "--container"
                | "-C"
                | "-f"
                | "--kubeconfig"
                | "-H"
                | "--host"
                | "-U"
                | "-d"
                | "-p"
                | "--since"
                | "--tail"
                | "-t"
                | "--type"
                | "-s"
                | "-g"
                | "--field-selector"
        ) {
            skip = true;
            continue;
        }
        if a.starts_with('-') {
            continue;
        }
        out.push(a.to_string());
    }
    out
}

fn has(args: &[&str], flags: &[&str]) -> bool {
    args.iter().any(|a| {
        flags
            .iter()
            .any(|f| a == f || (f.starts_with("--") && a.starts_with(&format!("{f}="))))
    })
}

fn by_program(name: &str, args: &[&str]) -> (Effect, String) {
    use Effect::*;
    let words = sub(args);
    let first = words.first().map(String::as_str).unwrap_or("");
    let second = words.get(1).map(String::as_str).unwrap_or("");
    let said = |e: Effect, why: &str| (e, why.to_string());
    match name {
        "rm" | "rmdir" | "dd" | "shred" | "wipefs" | "fdisk" | "sfdisk" | "parted" | "mkswap"
        | "shutdown" | "reboot" | "poweroff" | "halt" | "userdel" | "groupdel" | "truncate" => {
            said(Destructive, "deletes, overwrites or stops the machine")
        }
        _ if name.starts_with("mkfs") => said(Destructive, "formats a file system"),
        "kill" | "pkill" | "killall" => said(Destructive, "kills processes"),
        "mv"
        | "cp"
        | "chmod"
        | "chown"
        | "chgrp"
        | "ln"
        | "mkdir"
        | "touch"
        | "tee"
        | "install"
        | "rsync"
        | "scp"
        | "useradd"
        | "usermod"
        | "passwd"
        | "chpasswd"
        | "groupadd"
        | "visudo"
        | "mount"
        | "umount"
        | "swapoff"
        | "swapon"
        | "modprobe"
        | "rmmod"
        | "insmod"
        | "apt"
        | "apt-get"
        | "dpkg"
        | "yum"
        | "dnf"
        | "rpm"
        | "pip"
        | "pip3"
        | "npm"
        | "snap"
        | "curl"
        | "wget"
        | "setfacl"
        | "chattr"
        | "hostnamectl"
        | "timedatectl"
        | "update-alternatives" => {
            if (name == "mount" && args.is_empty())
                || (matches!(name, "apt" | "dpkg" | "rpm" | "snap" | "pip" | "pip3")
                    && matches!(
                        first,
                        "list" | "show" | "search" | "policy" | "-l" | "-q" | "freeze"
                    ))
                || (name == "dpkg" && has(args, &["-l", "-L", "-s", "--list", "--status"]))
                || (name == "rpm" && has(args, &["-q", "-qa", "-qi", "-ql"]))
                || (name == "timedatectl" && matches!(first, "" | "status" | "show"))
                || (name == "hostnamectl" && matches!(first, "" | "status"))
            {
                said(ReadOnly, "lists or shows")
            } else if name == "curl" || name == "wget" {
                said(Unknown, "network client: may send or fetch anything")
            } else {
                said(Mutating, "changes files, users, packages or mounts")
            }
        }
        "crontab" => {
            if has(args, &["-l"]) {
                said(ReadOnly, "lists the crontab")
            } else if has(args, &["-r"]) {
                said(Destructive, "removes the crontab")
            } else {
                said(Mutating, "edits the crontab")
            }
        }
        "env" | "printenv" | "export" | "set" => said(
            CredentialRead,
            "prints the environment (credentials often live there)",
        ),
        "sysctl" => {
            if has(args, &["-w", "--write", "-p", "--load", "--system"])
                || args.iter().any(|a| a.contains('='))
            {
                said(Mutating, "writes kernel parameters")
            } else {
                said(ReadOnly, "reads kernel parameters")
            }
        }
        "iptables" | "ip6tables" | "nft" | "ufw" | "firewall-cmd" => {
            if has(args, &["-L", "-S", "--list", "-nL", "-nvL", "-vnL"])
                || matches!(first, "list" | "status")
            {
                said(ReadOnly, "lists firewall rules")
            } else if has(args, &["-F", "--flush", "-X", "-D", "--delete"])
                || matches!(first, "flush" | "delete" | "disable" | "reset")
            {
                said(Destructive, "flushes or deletes firewall rules")
            } else {
                said(Mutating, "changes firewall rules")
            }
        }
        "systemctl" => {
            const READ: &[&str] = &[
                "",
                "status",
                "show",
                "cat",
                "list-units",
                "list-unit-files",
                "list-timers",
                "list-sockets",
                "list-dependencies",
                "is-active",
                "is-enabled",
                "is-failed",
                "is-system-running",
                "list-jobs",
                "get-default",
                "list-machines",
                "help",
            ];
            const DESTRUCTIVE: &[&str] = &[
                "stop",
                "kill",
                "mask",
                "disable",
                "isolate",
                "poweroff",
                "reboot",
                "halt",
                "kexec",
                "rescue",
                "emergency",
                "default",
                "clean",
            ];
            if READ.contains(&first) {
                said(ReadOnly, "shows systemd state")
            } else if DESTRUCTIVE.contains(&first) {
                said(
                    Destructive,
                    "stops, disables or masks units, or the machine",
                )
            } else {
                said(Mutating, "changes systemd units")
            }
        }
        "journalctl" => {
            if args.iter().any(|a| {
                a.starts_with("--vacuum")
                    || *a == "--rotate"
                    || *a == "--flush"
                    || *a == "--relinquish-var"
            }) {
                said(Destructive, "deletes or rotates journal files")
            } else {
                said(ReadOnly, "reads the journal")
            }
        }
        "kubectl" | "oc" | "k" => kubectl(first, second, args),
        "helm" => match first {
            "list" | "ls" | "status" | "history" | "show" | "template" | "search" | "version"
            | "env" | "lint" | "repo"
                if first != "repo" || matches!(second, "list" | "ls") =>
            {
                said(ReadOnly, "reads releases or charts")
            }
            "get" if second == "values" || second == "all" => said(
                CredentialRead,
                "release values often carry passwords and tokens",
            ),
            "get" => said(ReadOnly, "reads a release"),
            "uninstall" | "delete" | "del" | "un" => said(Destructive, "removes a release"),
            _ => said(Mutating, "installs, upgrades or rolls back releases"),
        },
        "docker" | "podman" | "nerdctl" => docker(first, second),
        "crictl" | "ctr" => match first {
            "ps" | "images" | "img" | "pods" | "logs" | "stats" | "statsp" | "info" | "version"
            | "imagefsinfo" | "containers" | "c" | "tasks" | "t" | "i" | "namespaces" | "ns" => {
                if matches!(second, "rm" | "delete" | "del" | "kill") {
                    said(Destructive, "removes or kills containers or images")
                } else {
                    said(ReadOnly, "lists or shows containers")
                }
            }
            "inspect" | "inspectp" | "inspecti" => said(
                CredentialRead,
                "container configs carry environment variables (often secrets)",
            ),
            "rm" | "rmp" | "rmi" | "stop" | "stopp" | "kill" => {
                said(Destructive, "removes or stops containers")
            }
            _ => said(Mutating, "changes containers"),
        },
        "git" => git(first, second, args),
        "psql" => psql(args),
        "mysql" | "mariadb" | "mongo" | "mongosh" | "redis-cli" => said(
            Unknown,
            "database client: what it does depends on the query",
        ),
        "nginx" => {
            if has(args, &["-s"]) {
                said(Mutating, "signals the nginx master (reload/stop)")
            } else {
                said(ReadOnly, "tests or shows the configuration")
            }
        }
        "ip" => {
            const WRITE: &[&str] = &[
                "add", "del", "delete", "set", "flush", "change", "replace", "append", "exec",
            ];
            if words.iter().any(|w| WRITE.contains(&w.as_str())) {
                said(Mutating, "changes network configuration")
            } else {
                said(ReadOnly, "shows network state")
            }
        }
        "dmesg" => {
            if has(
                args,
                &[
                    "-c",
                    "-C",
                    "--clear",
                    "--read-clear",
                    "-n",
                    "--console-level",
                ],
            ) {
                said(Mutating, "clears the kernel ring buffer")
            } else {
                said(ReadOnly, "reads the kernel ring buffer")
            }
        }
        "find" => {
            if has(args, &["-delete"]) {
                said(Destructive, "deletes what it finds")
            } else if has(
                args,
                &[
                    "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprintf", "-fls",
                ],
            ) {
                said(Mutating, "runs commands or writes files")
            } else {
                said(ReadOnly, "lists files")
            }
        }
        "sed"
            if args
                .iter()
                .any(|a| a.starts_with("-i") || a.starts_with("--in-place")) =>
        {
            said(Mutating, "edits files in place")
        }
        "ss" | "netstat" | "dig" | "nslookup" | "host" | "ping" | "ping6" | "traceroute"
        | "tracepath" | "mtr" | "arp" | "ethtool" | "resolvectl" | "nmcli"
            if !has(args, &["-K", "--kill"]) =>
        {
            said(ReadOnly, "network diagnostics")
        }
        "df" | "du" | "free" | "uptime" | "lsblk" | "blkid" | "findmnt" | "vmstat" | "iostat"
        | "mpstat" | "pidstat" | "sar" | "top" | "htop" | "ps" | "pgrep" | "pstree" | "lsof"
        | "uname" | "hostname" | "id" | "who" | "w" | "last" | "lastlog" | "date" | "ls"
        | "stat" | "file" | "cat" | "head" | "tail" | "less" | "more" | "grep" | "egrep"
        | "zgrep" | "zcat" | "wc" | "tree" | "lscpu" | "lsmem" | "lspci" | "lsusb" | "lsmod"
        | "smartctl" | "sensors" | "nproc" | "getent" | "which" | "whereis" | "readlink"
        | "realpath" | "md5sum" | "sha256sum" | "openssl" | "timeout" | "watch"
        | "systemd-analyze" | "loginctl" | "localectl" | "networkctl" | "busctl"
        | "coredumpctl" | "pidof" | "nice" | "numfmt" | "sort" | "uniq" | "awk" | "sed" | "jq"
        | "cut" | "tr" | "column" | "strings" | "xxd" | "od" | "base64" | "diff" | "cmp"
        | "echo" | "printf" | "true" | "false" | "sleep" | "test" | "[" | "pwd" | "whoami"
        | "groups" | "locale" | "zless" | "xzcat" | "bzcat" | "journalctl-less" => {
            if name == "openssl"
                && !matches!(first, "x509" | "s_client" | "version" | "verify" | "crl" | "req" if !has(args, &["-new", "-newkey"]))
            {
                said(Unknown, "openssl can create, convert and reveal keys")
            } else if name == "top" && !has(args, &["-b", "-bn1", "-n"]) {
                said(ReadOnly, "interactive process view")
            } else {
                said(ReadOnly, "reads or shows")
            }
        }
        _ if RUNS_ANY_CODE.contains(&name) => said(Unknown, "runs arbitrary code or opens a shell"),
        _ => (
            Unknown,
            format!("`{name}` is not in the tables of known programs"),
        ),
    }
}

fn kubectl(first: &str, second: &str, args: &[&str]) -> (Effect, String) {
    use Effect::*;
    let said = |e: Effect, why: &str| (e, why.to_string());
    let secret_kind = |w: &str| {
        let w = w.split('/').next().unwrap_or(w).to_ascii_lowercase();
        matches!(
            w.as_str(),
            "secret" | "secrets" | "sealedsecret" | "sealedsecrets"
        ) || w.starts_with("secret.")
            || w.starts_with("secrets.")
    };
    match first {
        "get" if secret_kind(second) && has(args, &["-o", "--output"]) => {
            said(CredentialRead, "prints secret values")
        }
        "get"
            if secret_kind(second)
                && args
                    .iter()
                    .any(|a| a.starts_with("-o") || a.starts_with("--output=")) =>
        {
            said(CredentialRead, "prints secret values")
        }
        "get" | "describe" | "logs" | "top" | "explain" | "api-resources" | "api-versions"
        | "version" | "cluster-info" | "events" | "diff" | "wait" => {
            said(ReadOnly, "reads cluster state")
        }
        "auth" if second == "can-i" || second == "whoami" => {
            said(ReadOnly, "asks the API about permissions")
        }
        "rollout" if matches!(second, "status" | "history") => {
            said(ReadOnly, "reads rollout state")
        }
        "rollout" => said(Mutating, "restarts, undoes or pauses a rollout"),
        "config" if has(args, &["--raw", "--flatten"]) => {
            said(CredentialRead, "prints kubeconfig credentials")
        }
        "config"
            if matches!(
                second,
                "view" | "get-contexts" | "current-context" | "get-clusters"
            ) =>
        {
            said(ReadOnly, "reads the kubeconfig (redacted)")
        }
        "create" if second == "token" => said(CredentialRead, "mints a service-account token"),
        "delete" | "drain" => said(Destructive, "deletes or evicts resources"),
        "exec" | "attach" | "cp" | "debug" | "port-forward" | "proxy" | "run" => {
            said(Mutating, "runs commands in or opens channels to pods")
        }
        _ => said(Mutating, "changes cluster state"),
    }
}

fn docker(first: &str, second: &str) -> (Effect, String) {
    use Effect::*;
    let said = |e: Effect, why: &str| (e, why.to_string());
    match (first, second) {
        (
            "ps" | "images" | "logs" | "stats" | "top" | "version" | "info" | "events" | "port"
            | "diff" | "history" | "search",
            _,
        ) => said(ReadOnly, "lists or shows containers"),
        ("system", "df" | "info" | "events")
        | (
            "container" | "image" | "network" | "volume" | "context" | "compose",
            "ls" | "ps" | "logs" | "list",
        ) => said(ReadOnly, "lists or shows"),
        ("inspect", _) | (_, "inspect") => said(
            CredentialRead,
            "container configs carry environment variables (often secrets)",
        ),
        ("rm" | "rmi" | "kill" | "stop" | "prune", _)
        | (_, "rm" | "prune" | "down" | "kill" | "stop") => {
            said(Destructive, "removes, stops or prunes")
        }
        ("login", _) => said(CredentialRead, "handles registry credentials"),
        _ => said(Mutating, "runs, changes or executes in containers"),
    }
}

fn git(first: &str, second: &str, args: &[&str]) -> (Effect, String) {
    use Effect::*;
    let said = |e: Effect, why: &str| (e, why.to_string());
    match first {
        "log" | "show" | "diff" | "status" | "blame" | "rev-parse" | "describe" | "ls-files"
        | "ls-tree" | "grep" | "shortlog" | "reflog" | "cat-file" | "rev-list" | "whatchanged"
        | "name-rev" | "for-each-ref" | "show-ref" | "count-objects" | "version" => {
            said(ReadOnly, "reads the repository")
        }
        "branch" | "tag" | "remote" | "stash" | "config" | "worktree" => {
            let writes = has(
                args,
                &[
                    "-d",
                    "-D",
                    "--delete",
                    "-m",
                    "-M",
                    "-f",
                    "--force",
                    "--unset",
                    "--add",
                    "--replace-all",
                ],
            ) || (first == "remote"
                && matches!(
                    second,
                    "add" | "remove" | "rm" | "set-url" | "rename" | "prune"
                ))
                || (first == "stash" && !matches!(second, "list" | "show"))
                || (first == "config"
                    && !has(
                        args,
                        &["--get", "--list", "-l", "--get-all", "--get-regexp"],
                    ))
                || (matches!(first, "branch" | "tag")
                    && !second.is_empty()
                    && !has(
                        args,
                        &["-l", "--list", "--contains", "-a", "-r", "-v", "-vv"],
                    ))
                || (first == "worktree" && second != "list");
            if writes {
                said(Mutating, "changes refs, remotes, stashes or config")
            } else {
                said(ReadOnly, "lists refs, remotes or config")
            }
        }
        "reset" if has(args, &["--hard"]) => said(Destructive, "discards work"),
        "clean" => said(Destructive, "deletes untracked files"),
        "push"
            if has(
                args,
                &[
                    "-f",
                    "--force",
                    "--force-with-lease",
                    "--delete",
                    "-d",
                    "--mirror",
                ],
            ) =>
        {
            said(Destructive, "rewrites or deletes remote history")
        }
        "checkout" if has(args, &["--", "-f", "--force", "."]) => {
            said(Destructive, "discards local changes")
        }
        _ => said(Mutating, "changes the repository or talks to remotes"),
    }
}

fn psql(args: &[&str]) -> (Effect, String) {
    use Effect::*;
    let mut sql: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        if (a == "-c" || a == "--command") && i + 1 < args.len() {
            sql.push(args[i + 1]);
            i += 2;
            continue;
        }
        if let Some(rest) = a.strip_prefix("--command=") {
            sql.push(rest);
        }
        if a == "-f" || a.starts_with("--file") {
            return (Unknown, "runs SQL from a file".into());
        }
        i += 1;
    }
    if sql.is_empty() {
        return (Unknown, "interactive psql or SQL on stdin".into());
    }
    let mut worst = (ReadOnly, "read-only SQL".to_string());
    for text in sql {
        let lower = text.to_ascii_lowercase();
        let first = lower
            .trim_start()
            .split(|c: char| !c.is_ascii_alphabetic())
            .next()
            .unwrap_or("");
        let effect = if lower.trim_start().starts_with('\\') {
            (Unknown, "a psql meta-command".to_string())
        } else if [
            "pg_authid",
            "pg_shadow",
            "pg_user_mapping",
            "passwd",
            "pg_read_file",
            "pg_read_binary_file",
            "lo_export",
            "lo_import",
        ]
        .iter()
        .any(|t| lower.contains(t))
        {
            (
                CredentialRead,
                "reads password hashes or server files".to_string(),
            )
        } else {
            match first {
                "select" | "explain" | "show" | "with" | "table" | "values" => {
                    if lower.contains("pg_terminate_backend") || lower.contains("pg_cancel_backend")
                    {
                        (Destructive, "terminates or cancels backends".to_string())
                    } else if lower.contains("delete ")
                        || lower.contains("update ")
                        || lower.contains("insert ")
                    {
                        (
                            Mutating,
                            "a data-changing statement inside a query".to_string(),
                        )
                    } else {
                        (ReadOnly, "read-only SQL".to_string())
                    }
                }
                "drop" | "truncate" | "delete" => {
                    (Destructive, format!("SQL {}", first.to_uppercase()))
                }
                _ => (Mutating, format!("SQL {}", first.to_uppercase())),
            }
        };
        if effect.0 < worst.0 {
            worst = effect;
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effect(line: &str) -> Effect {
        classify(&shell_words::split(line).unwrap()).0
    }

    #[test]
    fn judgements() {
        use Effect::*;
        for (line, want) in [
            ("systemctl status nginx", ReadOnly),
            ("systemctl restart nginx", Mutating),
            ("systemctl stop nginx", Destructive),
            ("journalctl -u nginx -n 50", ReadOnly),
            ("journalctl --vacuum-time=1d", Destructive),
            ("kubectl get pods -n web", ReadOnly),
            ("kubectl -n web get secret db -o yaml", CredentialRead),
            ("kubectl delete pod web-1 -n web", Destructive),
            ("kubectl rollout restart deploy/web", Mutating),
            ("kubectl rollout status deploy/web", ReadOnly),
            ("kubectl config view --raw", CredentialRead),
            ("psql -c 'select 1'", ReadOnly),
            ("psql -c 'DROP TABLE users'", Destructive),
            (
                "psql -c 'select rolpassword from pg_authid'",
                CredentialRead,
            ),
            ("psql -c 'select pg_terminate_backend(123)'", Destructive),
            ("cat /etc/shadow", CredentialRead),
            ("cat /root/.ssh/id_ed25519", CredentialRead),
            ("cat /etc/nginx/nginx.conf", ReadOnly),
            ("rm -rf /var/lib/app", Destructive),
            ("docker inspect web", CredentialRead),
            ("docker ps -a", ReadOnly),
            ("helm get values web", CredentialRead),
            ("helm uninstall web", Destructive),
            ("git log -5", ReadOnly),
            ("git reset --hard HEAD~1", Destructive),
            ("ip addr show", ReadOnly),
            ("ip route del default", Mutating),
            ("env", CredentialRead),
            ("frobnicate --now", Unknown),
            ("awk 'BEGIN{system(\"id\")}'", Unknown),
            ("sed -n 5p /etc/hosts", ReadOnly),
            ("sed 's/a/b/e' /etc/hosts", Unknown),
            ("less +!id /etc/hosts", Unknown),
            (
                "journalctl -u nginx --output-fields=MESSAGE -o json",
                ReadOnly,
            ),
        ] {
            assert_eq!(effect(line), want, "{line}");
        }
    }

    #[test]
    fn option_level_exec_is_found_and_plain_options_are_not() {
        let runs = |line: &str| runs_code(&shell_words::split(line).unwrap());
        for line in [
            "tar -cf a.tar --checkpoint=1 --checkpoint-action=exec=id .",
            "tar -xf a.tar --to-command=id",
            "tar --use-compress-program=id -cf a.tar .",
            "tar -cIf id a.tar .",
            "tar cIf id a.tar .",
            "zip -TT=id a.zip f",
            "zip --unzip-command id a.zip f",
            "tcpdump -w x.pcap -G 10 -z ./evil",
            "rsync -ave ./evil a b:",
            "rsync --rsh=./evil a b:",
            "git -c core.pager=id log",
            "git -C /srv --config-env=core.pager=X log",
            "git fetch --upload-pack=id origin",
            "git clone -u id repo",
            "git archive --exec=id --remote=x HEAD",
            "find . -fprint /root/.bashrc",
            "find . -execdir id ;",
            "less -o /tmp/log /etc/hosts",
            "scp -oProxyCommand=id f h:",
            "sftp -o 'LocalCommand id' h",
            "awk '{print $1 | \"sh\"}' f",
            "awk '{print $0 > \"/tmp/x\"}' f",
            "awk -f prog.awk f",
            "sed -n '1e id' f",
            "sed '/x/w /tmp/out' f",
            "sed -e p -e 's|a|b|e' f",
            "sed -f script.sed f",
            "vim -c '!id' f",
            "nvim f",
            "strace -o /dev/null id",
        ] {
            assert!(runs(line).is_some(), "{line}");
        }
        for line in [
            "tar -czf a.tar.gz /srv/app",
            "tar -tvf a.tar",
            "zip -r a.zip dir",
            "tcpdump -i eth0 -c 10 -nn",
            "rsync -av /a/ /b/",
            "git log -c -1",
            "git grep -c foo",
            "git -C /srv/app status",
            "find /var/log -name '*.gz' -mtime +7",
            "less /etc/hosts",
            "scp -P 2222 f h:",
            "awk '$3 > 100 {print $1}' f",
            "sed -n '/error/p' f",
            "sed 's/a/b/g' f",
            "sed --sandbox 's/a/b/e' f",
            "journalctl -u nginx --output-fields=MESSAGE -o json",
        ] {
            assert_eq!(runs(line), None, "{line}");
        }
    }
}
