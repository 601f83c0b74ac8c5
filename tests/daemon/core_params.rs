//! Invariant 2 (typed, closed inputs) and invariant 1 (no shell), end to end through a real daemon:
//! every parameter type accepts what it should and refuses the rest with the parameter named;
//! hostile strings arrive as literal argv elements.
use crate::common;
use common::policy::{Category, Param, ParamType, Policy, Verb};
use common::*;
use verbd::protocol::Response;

/// `show` takes a parameter of every type; `literal` and `dash` take one each.
fn policy() -> String {
    Policy::new()
        .allow_root()
        .agents("me", &[0])
        .verb(
            "show",
            Verb::argv(
                Category::ReadOnly,
                &[
                    "/usr/bin/printf",
                    r"[%s]\n",
                    "{word}",
                    "{n}",
                    "mode={mode}",
                    "{unit}",
                    "{pod}",
                    "{host}",
                    "{since}",
                    "{file}",
                    "{verbose}",
                    "[",
                    "--extra",
                    "{extra}",
                    "]",
                ],
            )
            .description("print each argv element in brackets")
            .roles(&["me"])
            .param("word", Param::matching("[a-z]+").max_length(8))
            .param("n", Param::int(1, 100).default(10))
            .param("mode", Param::one_of(&["fast", "slow"]))
            .param("unit", Param::of(ParamType::SystemdUnit))
            .param("pod", Param::of(ParamType::K8sName))
            .param("host", Param::of(ParamType::Hostname))
            .param("since", Param::duration("1d"))
            .param("file", Param::path(&["@DIR@/data"]))
            .param("verbose", Param::flag("--verbose"))
            .param("extra", Param::matching(".*").optional()),
        )
        .verb(
            "literal",
            Verb::command(Category::ReadOnly, "/usr/bin/printf '[%s]\n' {text}")
                .description("hostile strings stay one literal argv element")
                .roles(&["me"])
                .param("text", Param::matching(r"[^\x00]*").max_length(100)),
        )
        .verb(
            "long",
            Verb::command(Category::ReadOnly, "/bin/true {text}")
                .description("a string whose own limit is above every value's")
                .roles(&["me"])
                .param("text", Param::matching("a*").max_length(100_000)),
        )
        .verb(
            "note",
            Verb::builtin(Category::Mutating, "file.write", &["@DIR@/data"])
                .description("a content parameter bounded by max_size")
                .roles(&["me"])
                .max_size("16")
                .without_approval(),
        )
        .verb(
            "dash",
            Verb::command(Category::ReadOnly, "/usr/bin/printf '[%s]\n' {offset}")
                .description("allow_dash opt-in")
                .roles(&["me"])
                .param("offset", Param::int(-10, 10).allow_dash()),
        )
        .render()
}

fn good() -> Vec<(&'static str, String)> {
    vec![
        ("word", "abc".into()),
        ("mode", "fast".into()),
        ("unit", "nginx.service".into()),
        ("pod", "web-7d9f".into()),
        ("host", "db1.internal".into()),
        ("since", "5m".into()),
    ]
}

fn call_with(d: &Daemon, overrides: &[(&str, &str)], extra_file: bool) -> Response {
    let file = d.path("data/x.log");
    let mut args: Vec<(String, String)> = good()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    if extra_file {
        args.push(("file".into(), file.to_str().unwrap().into()));
    }
    for (k, v) in overrides {
        args.retain(|(key, _)| key != k);
        if !v.is_empty() || *k == "extra" {
            args.push((k.to_string(), v.to_string()));
        }
    }
    let refs: Vec<(&str, &str)> = args.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    d.call("show", &refs)
}

fn start() -> Option<Daemon> {
    if !require_root("core_params") {
        return None;
    }
    Some(Daemon::start_with(&policy(), |dir| {
        std::fs::create_dir(dir.join("data")).unwrap();
        std::fs::write(dir.join("data/x.log"), "x").unwrap();
    }))
}

fn assert_invalid(response: &Response, param: &str) {
    match response {
        Response::Invalid { param: Some(p), .. } => assert_eq!(p, param, "{response:?}"),
        other => panic!("expected invalid `{param}`, got {other:?}"),
    }
}

#[test]
fn every_type_accepts_and_renders() {
    let Some(d) = start() else { return };
    let r = call_with(&d, &[("verbose", "true"), ("extra", "two words")], true);
    let file = d.path("data/x.log");
    // A path parameter reaches the child as the descriptor the daemon pinned (docs/policy.md);
    // the journal shows the validated path.
    assert_eq!(
        pinned_fd_as_n(&stdout_of(&r)),
        "[abc]\n[10]\n[mode=fast]\n[nginx.service]\n[web-7d9f]\n[db1.internal]\n[5m]\n[/proc/self/fd/N]\n[--verbose]\n[--extra]\n[two words]\n"
    );
    assert!(d.journal().contains(&file.display().to_string()));
    // Optional group and false flag vanish.
    let r = call_with(&d, &[("verbose", "false"), ("n", "7")], true);
    assert_eq!(
        pinned_fd_as_n(&stdout_of(&r)),
        "[abc]\n[7]\n[mode=fast]\n[nginx.service]\n[web-7d9f]\n[db1.internal]\n[5m]\n[/proc/self/fd/N]\n"
    );
}

/// `/proc/self/fd/17` → `/proc/self/fd/N` (the number is whatever the daemon's descriptor is).
fn pinned_fd_as_n(text: &str) -> String {
    regex::Regex::new(r"/proc/self/fd/\d+")
        .unwrap()
        .replace_all(text, "/proc/self/fd/N")
        .into_owned()
}

#[test]
fn every_type_rejects_with_the_param_named() {
    let Some(d) = start() else { return };
    let outside = "/etc/passwd".to_string();
    let dotdot = format!("{}/data/../../etc/passwd", d.dir.path().display());
    let cases: Vec<(&str, String)> = vec![
        ("word", "ABC".into()),
        ("word", "abcdefghijk".into()),
        ("word", "a b".into()),
        ("n", "0".into()),
        ("n", "101".into()),
        ("n", "ten".into()),
        ("mode", "medium".into()),
        ("unit", "--since=today".into()),
        ("unit", "a;b".into()),
        ("pod", "Web".into()),
        ("pod", "-web".into()),
        ("host", "db_1".into()),
        ("host", "-h".into()),
        ("since", "5".into()),
        ("since", "2d".into()),
        ("file", outside),
        ("file", dotdot),
        ("file", "relative/x".into()),
        ("verbose", "maybe".into()),
    ];
    for (param, value) in cases {
        let r = call_with(&d, &[(param, value.as_str())], param != "file");
        assert_invalid(&r, param);
    }
}

#[test]
fn nul_and_newline_refused_in_every_string_like_type() {
    let Some(d) = start() else { return };
    for param in ["word", "mode", "unit", "pod", "host", "since", "extra"] {
        for bad in ["ab\ncd", "ab\0cd", "ab\rcd"] {
            let r = call_with(&d, &[(param, bad)], true);
            match &r {
                Response::Invalid {
                    param: Some(p),
                    rule,
                    ..
                } => {
                    assert_eq!(p, param);
                    assert_eq!(rule, "control-character", "{r:?}");
                }
                other => panic!("{param}={bad:?}: {other:?}"),
            }
        }
    }
}

#[test]
fn option_injection_refused_unless_allowed() {
    let Some(d) = start() else { return };
    // `extra` accepts any text but begins an argv element: a leading dash is refused.
    let r = call_with(&d, &[("extra", "--output=/etc/passwd")], true);
    match &r {
        Response::Invalid {
            param: Some(p),
            rule,
            ..
        } => {
            assert_eq!(p, "extra");
            assert_eq!(rule, "option-injection");
        }
        other => panic!("{other:?}"),
    }
    let r = d.call("literal", &[("text", "-rf")]);
    assert_invalid(&r, "text");
    // Opt-in: a negative int where the verb allows it.
    assert_eq!(stdout_of(&d.call("dash", &[("offset", "-5")])), "[-5]\n");
}

#[test]
fn unknown_and_missing_params() {
    let Some(d) = start() else { return };
    let r = d.call("show", &[("word", "abc"), ("bogus", "1")]);
    assert_invalid(&r, "bogus");
    let r = d.call("show", &[("word", "abc")]);
    match &r {
        Response::Invalid {
            message, missing, ..
        } => {
            assert_eq!(
                message,
                "REQUIRES_CLARIFICATION: missing required parameters: file, host, mode, pod, since, unit"
            );
            assert_eq!(missing.len(), 6);
        }
        other => panic!("{other:?}"),
    }
    // The CLI prints it on stderr with exit code 65.
    let out = d.cli(&["call", "show", "word=abc"]);
    assert_eq!(out.status.code(), Some(65));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("REQUIRES_CLARIFICATION: missing required parameters: file, host")
    );
    // Unknown verb: denied without revealing whether it exists.
    match d.call("nope", &[]) {
        Response::Denied { reason } => {
            assert!(reason.contains("does not exist or is not available"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn shell_metacharacters_arrive_as_literal_argv() {
    let Some(d) = start() else { return };
    let marker = d.path("pwned");
    for hostile in [
        format!("$(touch {})", marker.display()),
        format!(";touch {}", marker.display()),
        format!("`touch {}`", marker.display()),
        format!("a && touch {} || b", marker.display()),
        "| id > /tmp/x".to_string(),
        "'quoted' \"dq\" \\back".to_string(),
    ] {
        let r = d.call("literal", &[("text", hostile.as_str())]);
        assert_eq!(
            stdout_of(&r),
            format!("[{hostile}]\n"),
            "one literal element"
        );
    }
    assert!(!marker.exists(), "no shell ever ran the text");
}

/// Every bound is the largest value allowed, not the first one refused: the value at the limit
/// runs, one past it is refused by the rule that names the limit.
#[test]
fn every_bound_admits_its_limit_and_refuses_one_past_it() {
    let Some(d) = start() else { return };
    let rule_of = |r: &Response| match r {
        Response::Invalid { rule, .. } => rule.clone(),
        other => panic!("expected a refusal, got {other:?}"),
    };
    let at_limit = [
        ("word", "abcdefgh"),
        ("n", "1"),
        ("n", "100"),
        ("since", "1d"),
        ("since", "86400s"),
    ];
    for (param, value) in at_limit {
        let r = call_with(&d, &[(param, value)], true);
        assert!(matches!(r, Response::Ok { .. }), "{param}={value}: {r:?}");
    }
    let past_limit = [
        ("word", "abcdefghi", "max-length"),
        ("n", "0", "range"),
        ("n", "101", "range"),
        ("since", "86401s", "range"),
    ];
    for (param, value, rule) in past_limit {
        let r = call_with(&d, &[(param, value)], true);
        assert_invalid(&r, param);
        assert_eq!(rule_of(&r), rule, "{param}={value}");
    }
    // DNS-style names: a label of 63 characters and a name of 253 (RFC 1123; Kubernetes).
    let label = |c: &str, n: usize| c.repeat(n);
    let name_of = |len: usize| {
        // Labels of 63 joined by dots, the last one shortened to reach `len` exactly.
        let mut name = String::new();
        while name.len() + 64 < len {
            name.push_str(&label("a", 63));
            name.push('.');
        }
        name.push_str(&label("b", len - name.len()));
        name
    };
    for param in ["pod", "host"] {
        let (at, past) = (name_of(253), name_of(254));
        assert_eq!((at.len(), past.len()), (253, 254));
        let r = call_with(&d, &[(param, &at)], true);
        assert!(matches!(r, Response::Ok { .. }), "{param} of 253: {r:?}");
        let r = call_with(&d, &[(param, &label("a", 63))], true);
        assert!(
            matches!(r, Response::Ok { .. }),
            "{param} label of 63: {r:?}"
        );
        let rule = if param == "pod" {
            "k8s-name"
        } else {
            "hostname"
        };
        for value in [past, format!("{}.x", label("a", 64))] {
            let r = call_with(&d, &[(param, &value)], true);
            assert_invalid(&r, param);
            assert_eq!(rule_of(&r), rule, "{param} of {}", value.len());
        }
    }
    // A hostname's trailing dot is not part of its length.
    let r = call_with(&d, &[("host", &format!("{}.", name_of(253)))], true);
    assert!(
        matches!(r, Response::Ok { .. }),
        "host of 253 and a dot: {r:?}"
    );
    // Any parameter's value: at most 64 KiB, whatever its own limit says.
    let longest = "a".repeat(64 * 1024);
    let r = d.call("long", &[("text", &longest)]);
    assert!(matches!(r, Response::Ok { .. }), "64 KiB: {r:?}");
    let r = d.call("long", &[("text", &format!("{longest}a"))]);
    assert_invalid(&r, "text");
    assert!(
        format!("{r:?}").contains("no parameter of this type takes more than 65536"),
        "{r:?}"
    );
    // File content: at most the verb's `max_size`, checked as a parameter before any file.
    let note = d.path("data/note.txt").display().to_string();
    let r = d.call("note", &[("path", &note), ("content", &"c".repeat(16))]);
    assert!(
        matches!(r, Response::Ok { .. }),
        "16 bytes of content: {r:?}"
    );
    let r = d.call("note", &[("path", &note), ("content", &"c".repeat(17))]);
    assert_invalid(&r, "content");
    assert_eq!(rule_of(&r), "max-size");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "c".repeat(16));
}

/// What an agent reads before it calls: `list` describes every parameter by its type and bounds.
#[test]
fn list_describes_every_parameter_by_its_type_and_bounds() {
    let Some(d) = start() else { return };
    let Response::Verbs { verbs } = d.request(&verbd::protocol::Request::List {}) else {
        panic!("list did not answer with the verbs");
    };
    let kinds = |verb: &str| -> std::collections::BTreeMap<String, String> {
        let info = verbs.iter().find(|v| v.name == verb).expect(verb);
        info.params
            .iter()
            .map(|p| (p.name.clone(), p.kind.clone()))
            .collect()
    };
    let data = d.path("data").display().to_string();
    let show = kinds("show");
    for (param, kind) in [
        ("word", "string /[a-z]+/ (max 8 bytes)".to_string()),
        ("n", "int 1..=100".into()),
        ("mode", "enum(fast|slow)".into()),
        ("unit", "systemd-unit".into()),
        ("pod", "k8s-name".into()),
        ("host", "hostname".into()),
        ("since", "duration (e.g. 30s, 5m; max 86400s)".into()),
        ("file", format!("path under {data}")),
        ("verbose", "bool (true adds --verbose)".into()),
    ] {
        assert_eq!(show.get(param), Some(&kind), "{param} in {show:?}");
    }
    let note = kinds("note");
    assert_eq!(note["content"], "text (max 16 bytes)");
    assert_eq!(note["path"], format!("path under {data} (or a new file)"));
}

/// An `int` is an optional `-` and 1 to 19 ASCII digits, nothing else: Rust's own parser would
/// also take a leading `+` and any number of leading zeros.
#[test]
fn an_int_is_a_sign_and_at_most_nineteen_digits() {
    let Some(d) = start() else { return };
    let not_an_integer = |r: &Response, param: &str| {
        assert_invalid(r, param);
        let Response::Invalid { rule, message, .. } = r else {
            unreachable!()
        };
        assert_eq!(rule, "int", "{r:?}");
        assert!(message.contains("is not an integer"), "{r:?}");
    };
    for value in ["+5", "ten", "5 ", "00000000000000000050"] {
        not_an_integer(&call_with(&d, &[("n", value)], true), "n");
    }
    let r = call_with(&d, &[("n", "0000000000000000050")], true);
    assert_eq!(stdout_of(&r).lines().nth(1), Some("[50]"), "{r:?}");
    not_an_integer(&d.call("dash", &[("offset", "-")]), "offset");
    assert_eq!(stdout_of(&d.call("dash", &[("offset", "-7")])), "[-7]\n");
}
