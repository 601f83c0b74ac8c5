//! File verbs through a real daemon never follow a symlink, also one that stays inside the root
//! (which `RESOLVE_BENEATH` alone would follow): a link in the root that leads to a protected
//! name (`.git/config`, whose `core.fsmonitor` git runs) must not let an agent write, append to
//! or read that name under an innocent one. The calls come from a hostile uid (63510); the
//! control writes and reads a plain file in the same root.
use crate::common;
use crate::hostile;

use common::policy::{Category, Policy, Verb};
use common::*;
use verbd::protocol::Response;

const AGENT: u32 = 63510;
const CONFIG: &str = "[core]\n\tbare = false\n";

/// The file verbs beneath `work` (`put`, `add`, `get`, `ls`), for the agent `agent`, the
/// writing ones without approval.
pub(crate) fn file_verbs_for(agent: u32) -> String {
    let file = |category, description: &str, builtin: &str| {
        Verb::builtin(category, builtin, &["@DIR@/work"])
            .description(description)
            .roles(&["agent"])
    };
    Policy::new()
        .allow_root()
        .agents("agent", &[agent])
        .verb(
            "put",
            file(Category::Mutating, "write a file", "file.write").without_approval(),
        )
        .verb(
            "add",
            file(Category::Mutating, "append to a file", "file.append").without_approval(),
        )
        .verb("get", file(Category::ReadOnly, "read a file", "file.read"))
        .verb(
            "ls",
            file(Category::ReadOnly, "list a directory", "file.list"),
        )
        .render()
}

fn start() -> Option<Daemon> {
    if !require_root("files_symlinks") {
        return None;
    }
    let d = Daemon::start_with(&file_verbs_for(AGENT), |dir| {
        let work = dir.join("work");
        std::fs::create_dir_all(work.join(".git")).unwrap();
        std::fs::write(work.join(".git/config"), CONFIG).unwrap();
        // Relative links that stay beneath the root.
        std::os::unix::fs::symlink(".git", work.join("dirlink")).unwrap();
        std::os::unix::fs::symlink(".git/config", work.join("cfglink")).unwrap();
        // A link below a real directory: the refusal must name the link, not the directory.
        std::fs::create_dir(work.join("sub")).unwrap();
        std::os::unix::fs::symlink("../.git", work.join("sub/gitlink")).unwrap();
    });
    d.open_socket();
    Some(d)
}

#[test]
fn a_symlink_inside_the_root_never_reaches_a_protected_name() {
    let Some(d) = start() else { return };
    let work = d.path("work");
    let at = |rel: &str| work.join(rel).display().to_string();
    let hook = "[core]\n\tfsmonitor = /usr/bin/touch /tmp/verbd-files-symlinks-pwned\n";
    let attacks = [
        ("put", at("dirlink/config"), Some(hook), "dirlink"),
        ("put", at("dirlink/hooks-new"), Some("x"), "dirlink"),
        ("add", at("cfglink"), Some(hook), "cfglink"),
        ("add", at("dirlink/config"), Some(hook), "dirlink"),
        ("get", at("cfglink"), None, "cfglink"),
        ("get", at("dirlink/config"), None, "dirlink"),
        ("ls", at("dirlink"), None, "dirlink"),
        ("put", at("sub/gitlink/config"), Some(hook), "sub/gitlink"),
        ("get", at("sub/gitlink/config"), None, "sub/gitlink"),
        ("ls", at("sub/gitlink"), None, "sub/gitlink"),
    ];
    let requests: Vec<_> = attacks
        .iter()
        .map(|(verb, path, content, _)| match content {
            Some(content) => hostile::call(verb, &[("path", path), ("content", content)]),
            None => hostile::call(verb, &[("path", path)]),
        })
        .collect();
    let answers = hostile::requests_as(AGENT, &d.socket, &requests);
    let mut followed = Vec::new();
    for ((verb, path, _, link), answer) in attacks.iter().zip(&answers) {
        let response = hostile::decode(answer);
        let text = format!("{response:?}");
        let refused_for_the_link = !matches!(response, Response::Ok { .. })
            && text.contains(&format!("work/{link} is a symbolic link"));
        if !refused_for_the_link {
            followed.push(format!("{verb} {path}: {text}"));
        }
    }
    assert!(
        followed.is_empty(),
        "calls not refused at their symlink:\n{}",
        followed.join("\n")
    );
    assert_eq!(
        std::fs::read_to_string(work.join(".git/config")).unwrap(),
        CONFIG
    );
    assert!(!work.join(".git/hooks-new").exists());
    assert!(
        std::fs::symlink_metadata(work.join("cfglink"))
            .unwrap()
            .is_symlink()
    );
    // Control: the same verbs write, append to and read a plain file in the same root.
    let plain = at("notes.txt");
    let answers = hostile::requests_as(
        AGENT,
        &d.socket,
        &[
            hostile::call("put", &[("path", &plain), ("content", "one\n")]),
            hostile::call("add", &[("path", &plain), ("content", "two\n")]),
            hostile::call("get", &[("path", &plain)]),
        ],
    );
    for answer in &answers[..2] {
        assert!(
            matches!(hostile::decode(answer), Response::Ok { .. }),
            "{:?}",
            hostile::decode(answer)
        );
    }
    assert_eq!(stdout_of(&hostile::decode(&answers[2])), "one\ntwo\n");
}
