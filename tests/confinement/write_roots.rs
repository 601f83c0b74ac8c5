//! Verb write roots are granted whole (issue 14, item 1): a verb can create, rename and remove
//! entries anywhere in its write roots — `mktemp` in the root, `mkdir` of a new directory, `mv`,
//! `rm` — like any Landlock or bwrap sandbox, while nothing outside them is writable. Protected
//! names inside a write root stay guarded for verbs through their typed parameters: a path
//! parameter never names a protected entry (a real `truncate {path}` verb, as a hostile uid).
use crate::common;
use crate::hostile;

use common::policy::{Category, Param, Policy, Sandbox, Verb};
use common::*;
use std::os::unix::fs::PermissionsExt;
use verbd::protocol::Response;

const AGENT: u32 = 61763;

/// Verbs of the profile `runs`, which writes `runs` alone.
fn policy() -> String {
    let runs = |description: &str, command: &str| {
        Verb::command(Category::ReadOnly, command)
            .description(description)
            .roles(&["agent"])
            .sandbox("runs")
    };
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .sandbox("runs", Sandbox::writing(&["@DIR@/runs"]))
        .verb(
            "mktemp",
            runs(
                "a scratch file at the top of the write root",
                "/usr/bin/mktemp @DIR@/runs/run-XXXXXX",
            ),
        )
        .verb(
            "mkdir",
            runs(
                "a new directory at the top of the write root",
                "/bin/mkdir @DIR@/runs/new-dir",
            ),
        )
        .verb(
            "rename",
            runs(
                "rename an entry at the top of the write root",
                "/bin/mv @DIR@/runs/before @DIR@/runs/after",
            ),
        )
        .verb(
            "remove",
            runs(
                "remove an entry at the top of the write root",
                "/bin/rm @DIR@/runs/after",
            ),
        )
        .verb(
            "mktemp-outside",
            runs(
                "control: a scratch file outside every write root",
                "/usr/bin/mktemp @DIR@/outside/run-XXXXXX",
            ),
        )
        .verb(
            "empty",
            runs(
                "empty a file in the write root",
                "/usr/bin/truncate -s 0 {path}",
            )
            .param("path", Param::path(&["@DIR@/runs"])),
        )
        .render()
}

fn start() -> Option<Daemon> {
    if !require_root("write_roots") {
        return None;
    }
    let d = Daemon::start_with(&policy(), |dir| {
        for sub in ["runs", "outside"] {
            std::fs::create_dir(dir.join(sub)).unwrap();
            std::fs::set_permissions(dir.join(sub), std::fs::Permissions::from_mode(0o777))
                .unwrap();
        }
        std::fs::write(dir.join("runs/before"), "moved").unwrap();
        std::fs::write(dir.join("runs/CLAUDE.md"), "operator memory").unwrap();
        std::fs::write(dir.join("runs/notes.txt"), "scratch notes").unwrap();
    });
    d.open_socket();
    Some(d)
}

/// Calls `verb` as the hostile agent; the response.
fn call(d: &Daemon, verb: &str, args: &[(&str, &str)]) -> Response {
    let answers = hostile::requests_as(AGENT, &d.socket, &[hostile::call(verb, args)]);
    hostile::decode(&answers[0])
}

fn exit_code(response: &Response) -> Option<i32> {
    match response {
        Response::Ok { result, .. } => result.exit.code,
        other => panic!("expected a run, got {other:?}"),
    }
}

#[test]
fn verbs_create_rename_and_remove_anywhere_in_their_write_roots() {
    let Some(d) = start() else { return };
    let made = call(&d, "mktemp", &[]);
    println!("mktemp: {made:?}");
    assert_eq!(exit_code(&made), Some(0), "{made:?}");
    let scratch = stdout_of(&made).trim().to_string();
    assert!(
        scratch.starts_with(d.path("runs/run-").to_str().unwrap()),
        "{scratch}"
    );
    assert!(std::path::Path::new(&scratch).is_file(), "{scratch}");

    let mkdir = call(&d, "mkdir", &[]);
    println!("mkdir: {mkdir:?}");
    assert_eq!(exit_code(&mkdir), Some(0), "{mkdir:?}");
    assert!(d.path("runs/new-dir").is_dir());

    let renamed = call(&d, "rename", &[]);
    println!("mv: {renamed:?}");
    assert_eq!(exit_code(&renamed), Some(0), "{renamed:?}");
    assert!(!d.path("runs/before").exists());
    assert_eq!(
        std::fs::read_to_string(d.path("runs/after")).unwrap(),
        "moved"
    );

    let removed = call(&d, "remove", &[]);
    println!("rm: {removed:?}");
    assert_eq!(exit_code(&removed), Some(0), "{removed:?}");
    assert!(!d.path("runs/after").exists());

    // Control: the same mktemp outside the write root is refused by the sandbox.
    let outside = call(&d, "mktemp-outside", &[]);
    println!("mktemp outside: {outside:?}");
    assert_ne!(exit_code(&outside), Some(0), "{outside:?}");
    let stderr = match &outside {
        Response::Ok { result, .. } => result.stderr.clone(),
        _ => unreachable!(),
    };
    assert!(stderr.contains("Permission denied"), "{stderr}");
    assert_eq!(
        std::fs::read_dir(d.path("outside")).unwrap().count(),
        0,
        "something was created outside the write root"
    );
}

#[test]
fn a_path_parameter_never_names_a_protected_entry() {
    let Some(d) = start() else { return };
    let notes = d.path("runs/notes.txt");
    let control = call(&d, "empty", &[("path", notes.to_str().unwrap())]);
    println!("control: {control:?}");
    assert_eq!(exit_code(&control), Some(0), "{control:?}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "");

    for name in ["CLAUDE.md", "claude.MD"] {
        let memory = d.path("runs").join(name);
        let attack = call(&d, "empty", &[("path", memory.to_str().unwrap())]);
        println!("{name}: {attack:?}");
        match &attack {
            Response::Invalid { message, .. } => {
                assert!(message.contains("protected name `claude.md`"), "{message}")
            }
            other => panic!("{name}: the protected entry was not refused: {other:?}"),
        }
    }
    assert_eq!(
        std::fs::read_to_string(d.path("runs/CLAUDE.md")).unwrap(),
        "operator memory"
    );
}
