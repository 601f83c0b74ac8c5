//! The typed test policy (`tests/common/policy.rs`) against the real loader: what the builder
//! renders compiles with `verbd::policy::compile` into the roles, approvals, sandbox profiles and
//! verbs it was given, and text that TOML must escape (quotes, backslashes, newlines, template
//! braces) arrives exactly as written.
use crate::common::policy::{
    Category, Command, CommandMode, NetworkMode, Param, ParamType, Policy, Quorum, Rlimits,
    Sandbox, Secret, Stream, Verb,
};
use verbd::policy::params::ParamKind;
use verbd::policy::{
    Category as LoadedCategory, CommandMode as LoadedCommandMode, RoleKind, VerbAction, compile,
};

#[test]
fn the_rendered_policy_loads_with_what_the_builder_was_given() {
    let out = tempfile::tempdir().unwrap();
    let root = out.path().to_str().unwrap();
    let awkward = "say \"hi\" \\ back\nthen {not a placeholder} 'done'";
    // In a template, literal braces are doubled.
    let awkward_element = "say \"hi\" \\ back\nthen {{braces}} 'done'";
    let policy = Policy::new()
        .allow_root()
        .shutdown_grace("1s")
        .agents("agent", &[61001, 61002])
        .agent_groups("bots", &["verbd-bots"])
        .humans("sre", &[61003])
        .approvers(&["sre"])
        .approvals_expire("30m")
        .notify(Command::Line("/bin/true {id}".into()))
        .secret("token", Secret::File("/etc/verbd/token".into()))
        .sandbox(
            "narrow",
            Sandbox {
                read: Some(vec!["/usr".into(), "/bin".into()]),
                write: Some(vec![root.into()]),
                network: Some(NetworkMode::Full),
                ..Sandbox::default()
            },
        )
        .verb(
            "echo",
            Verb::argv(
                Category::ReadOnly,
                &["/bin/echo", awkward_element, "{word}"],
            )
            .description(awkward)
            .roles(&["agent", "bots"])
            .param("word", Param::matching("[a-z]+"))
            .env("GREETING", awkward_element)
            .sandbox("narrow")
            .timeout("5s")
            .rate("2/h"),
        )
        .verb(
            "nuke",
            Verb::command(Category::Destructive, "/bin/echo deleted {name} {count}")
                .dry_run("/bin/echo would delete {name}")
                .roles(&["agent", "sre"])
                .param("name", Param::of(ParamType::K8sName))
                .param("count", Param::int(1, 9))
                .quorum(Quorum {
                    count: 1,
                    from: vec!["sre".into()],
                    max_per_role: Some(1),
                })
                .break_glass(&["sre"]),
        )
        .verb(
            "count",
            Verb::builtin(Category::Mutating, "file.append", &[root])
                .roles(&["agent", "sre"])
                .without_approval(),
        )
        .verb(
            "pick",
            Verb::command(Category::ReadOnly, "/bin/echo {colour}")
                .roles(&["agent"])
                .param("colour", Param::one_of(&["red", "green"])),
        );
    let text = policy.render();
    let loaded = compile(&text, "<builder>").unwrap_or_else(|e| panic!("{e}\n{text}"));

    assert!(loaded.daemon.allow_root);
    assert_eq!(loaded.daemon.shutdown_grace.as_secs(), 1);
    assert_eq!(loaded.roles["agent"].kind, RoleKind::Agent);
    assert_eq!(loaded.roles["agent"].uids, [61001, 61002]);
    assert_eq!(loaded.roles["bots"].groups, ["verbd-bots"]);
    assert_eq!(loaded.roles["sre"].kind, RoleKind::Human);
    assert_eq!(loaded.roles["sre"].uids, [61003]);
    assert_eq!(loaded.approvals.approvers, ["sre"]);
    assert_eq!(loaded.approvals.expires.as_secs(), 30 * 60);
    assert!(loaded.secrets.contains_key("token"));
    assert_eq!(
        loaded.sandboxes["narrow"].write,
        [std::path::PathBuf::from(root)]
    );
    assert_eq!(
        loaded.sandboxes["narrow"].network,
        verbd::sandbox::Network::Full
    );
    assert_eq!(
        loaded.verbs.keys().collect::<Vec<_>>(),
        ["count", "echo", "nuke", "pick"]
    );

    let echo = &loaded.verbs["echo"];
    assert_eq!(echo.description, awkward);
    assert_eq!(echo.category, Some(LoadedCategory::ReadOnly));
    assert!(!echo.needs_approval);
    assert_eq!(echo.roles, ["agent", "bots"]);
    assert_eq!(echo.sandbox, "narrow");
    assert_eq!(echo.timeout.as_secs(), 5);
    let rate = echo.rate.as_ref().unwrap();
    assert_eq!((rate.count, rate.per.as_secs()), (2, 3600));
    let VerbAction::Command { template, .. } = &echo.action else {
        panic!("echo is a command verb: {:?}", echo.action);
    };
    assert_eq!(template.source(), ["/bin/echo", awkward_element, "{word}"]);
    assert!(matches!(echo.params["word"].kind, ParamKind::Str { .. }));
    assert_eq!(echo.env[0].0, "GREETING");
    assert_eq!(echo.env[0].1.text(), awkward_element);

    let nuke = &loaded.verbs["nuke"];
    assert_eq!(nuke.category, Some(LoadedCategory::Destructive));
    assert!(nuke.needs_approval);
    assert!(nuke.quorum.is_some());
    assert_eq!(nuke.break_glass, ["sre"]);
    let VerbAction::Command { template, dry_run } = &nuke.action else {
        panic!("nuke is a command verb: {:?}", nuke.action);
    };
    assert_eq!(
        template.source(),
        ["/bin/echo", "deleted", "{name}", "{count}"]
    );
    assert_eq!(
        dry_run.as_ref().unwrap().source(),
        ["/bin/echo", "would", "delete", "{name}"]
    );
    assert!(matches!(
        nuke.params["count"].kind,
        ParamKind::Int { min: 1, max: 9 }
    ));

    let count = &loaded.verbs["count"];
    assert!(!count.needs_approval);
    assert!(matches!(count.action, VerbAction::File(_)));

    let ParamKind::Enum { values } = &loaded.verbs["pick"].params["colour"].kind else {
        panic!("colour is an enum");
    };
    assert_eq!(values, &["red", "green"]);
}

/// What the daemon, journal, cli and fair-limits tests build: the daemon's user and limits,
/// `[commands]` and a role's mode, a profile's rlimits, a verb's concurrency, stream bounds,
/// digest and examples, and the parameters of every remaining type.
#[test]
fn the_daemon_limits_commands_and_parameter_types_load_as_given() {
    let policy = Policy::new()
        .daemon_user("nobody")
        .max_connections(300)
        .max_connections_per_uid(250)
        .queue_timeout("120s")
        .agents("agent", &[61001])
        .agents("other", &[61002])
        .commands("agent", CommandMode::Advise)
        .commands_mode(CommandMode::Rewrite)
        .privileged_programs(&["psql"])
        .privileged_paths(&["/var/log"])
        .sandbox(
            "few_files",
            Sandbox {
                rlimits: Some(Rlimits { open_files: 32 }),
                ..Sandbox::default()
            },
        )
        .verb(
            "show",
            Verb::command(
                Category::ReadOnly,
                "/bin/echo {n} {host} {since} {file} {verbose} [ {extra} ]",
            )
            .roles(&["agent"])
            .sandbox("few_files")
            .max_concurrent(1)
            .sha256(&"0".repeat(64))
            .stream(Stream {
                max_duration: "20s".into(),
                max_lines: Some(5),
            })
            .param("n", Param::int(1, 100).default(10))
            .param("host", Param::of(ParamType::Hostname))
            .param("since", Param::duration("1d"))
            .param("file", Param::path(&["/var/log"]))
            .param("verbose", Param::flag("--verbose"))
            .param(
                "extra",
                Param::matching("[a-z]+").optional().description("one word"),
            )
            .accepts(&[("extra", "UPPER")])
            .rejects(&[("extra", "fine")]),
        );
    let text = policy.render();
    let loaded = compile(&text, "<builder>").unwrap_or_else(|e| panic!("{e}\n{text}"));

    assert_eq!(loaded.daemon.user.as_deref(), Some("nobody"));
    assert!(!loaded.daemon.allow_root);
    assert_eq!(loaded.daemon.max_connections, 300);
    assert_eq!(loaded.daemon.max_connections_per_uid, 250);
    assert_eq!(loaded.daemon.queue_timeout.as_secs(), 120);
    assert_eq!(loaded.roles["agent"].commands, LoadedCommandMode::Advise);
    assert_eq!(loaded.roles["other"].commands, LoadedCommandMode::Rewrite);
    assert_eq!(loaded.commands.privileged_programs, ["psql"]);
    assert_eq!(
        loaded.commands.privileged_paths,
        [std::path::PathBuf::from("/var/log")]
    );
    assert_eq!(loaded.sandboxes["few_files"].rlimits.open_files, 32);

    let show = &loaded.verbs["show"];
    assert_eq!(show.max_concurrent, Some(1));
    assert_eq!(show.sha256.as_deref(), Some("0".repeat(64).as_str()));
    let stream = show.stream.as_ref().unwrap();
    assert_eq!(
        (stream.max_duration.as_secs(), stream.max_lines),
        (20, Some(5))
    );
    assert_eq!(show.examples_accept[0]["extra"], "UPPER");
    assert_eq!(show.examples_reject[0]["extra"], "fine");
    assert_eq!(show.params["n"].default.as_deref(), Some("10"));
    assert!(matches!(show.params["host"].kind, ParamKind::Hostname));
    let ParamKind::Duration { max } = &show.params["since"].kind else {
        panic!("since is a duration");
    };
    assert_eq!(max.unwrap().as_secs(), 24 * 3600);
    let ParamKind::Path { roots, .. } = &show.params["file"].kind else {
        panic!("file is a path");
    };
    assert_eq!(roots, &[std::path::PathBuf::from("/var/log")]);
    let ParamKind::Bool { flag } = &show.params["verbose"].kind else {
        panic!("verbose is a bool");
    };
    assert_eq!(flag, "--verbose");
    let extra = &show.params["extra"];
    assert!(!extra.required);
    assert_eq!(extra.description, "one word");
}

/// What the confinement tests build: a profile that only writes, a path parameter that may
/// name a new file beneath that write root, and a profile's unix sockets and TCP ports.
#[test]
fn write_only_profiles_new_file_paths_and_sockets_load_as_given() {
    let out = tempfile::tempdir().unwrap();
    let root = out.path().to_str().unwrap();
    let socket = format!("{root}/s.sock");
    let policy = Policy::new()
        .agents("agent", &[61001])
        .sandbox("runs", Sandbox::writing(&[root]))
        .sandbox(
            "talks",
            Sandbox {
                unix_sockets: Some(vec![socket.clone()]),
                network: Some(NetworkMode::Ports {
                    connect_tcp: vec![5432],
                }),
                ..Sandbox::new(&["/usr"], &[])
            },
        )
        .verb(
            "create",
            Verb::command(Category::Mutating, "/usr/bin/touch {path}")
                .roles(&["agent"])
                .sandbox("runs")
                .param("path", Param::path(&[root]).create()),
        );
    let text = policy.render();
    let loaded = compile(&text, "<builder>").unwrap_or_else(|e| panic!("{e}\n{text}"));

    assert_eq!(
        loaded.sandboxes["runs"].write,
        [std::path::PathBuf::from(root)]
    );
    assert_eq!(
        loaded.sandboxes["talks"].unix_sockets,
        [std::path::PathBuf::from(&socket)]
    );
    assert!(loaded.sandboxes["talks"].write.is_empty());
    assert_eq!(
        loaded.sandboxes["talks"].network,
        verbd::sandbox::Network::ConnectTcp(vec![5432])
    );
    let ParamKind::Path { create, .. } = &loaded.verbs["create"].params["path"].kind else {
        panic!("path is a path");
    };
    assert!(create);
}
