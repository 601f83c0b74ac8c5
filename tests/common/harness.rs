//! What the areas' tests kept a copy of each: a secret file the daemon accepts, a daemon
//! started with the directories its verbs write beneath, its policy file rewritten for a restart
//! or reload, a call that must become a proposal, an approval by another uid, and the journal's
//! `exec` records of one proposal.
#![allow(dead_code)] // each test binary uses part of it

use super::Daemon;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

/// Write a secret file as the daemon accepts one: `value`, readable by its owner only.
pub fn write_secret(path: &Path, value: &str) {
    std::fs::write(path, value).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A call that became a proposal: its id, its full argument hash and the whole JSON answer.
pub struct Proposed {
    pub id: u64,
    pub hash: String,
    pub answer: serde_json::Value,
}

impl Daemon {
    /// Start a daemon on `policy` with `dirs` created in its temp dir (each beneath the one
    /// before it may be), and its socket open to every uid.
    pub fn start_open(policy: &str, dirs: &[&str]) -> Daemon {
        let d = Daemon::start_with(policy, |dir| {
            for sub in dirs {
                std::fs::create_dir(dir.join(sub)).unwrap();
            }
        });
        d.open_socket();
        d
    }

    /// Replace the policy file (`@DIR@` is the test's temp dir) for a restart or a reload.
    pub fn write_policy(&self, policy: &str) {
        let text = policy.replace("@DIR@", self.dir.path().to_str().unwrap());
        std::fs::write(&self.policy, text).unwrap();
    }

    /// `verbd call --json ARGS…` as `uid`, which must answer `confirm_required` (exit 73).
    pub fn propose_as(&self, uid: u32, args: &[&str]) -> Proposed {
        let mut argv = vec!["call", "--json"];
        argv.extend_from_slice(args);
        let out = self.cli_as(uid, &argv);
        assert_eq!(out.status.code(), Some(73), "{out:?}");
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {out:?}"));
        assert_eq!(answer["status"], "confirm_required", "{answer}");
        Proposed {
            id: answer["id"].as_u64().unwrap(),
            hash: answer["hash"].as_str().unwrap().to_string(),
            answer,
        }
    }

    /// `verbd approve ID --hash HASH` as `uid`.
    pub fn approve_as(&self, uid: u32, id: u64, hash: &str) -> Output {
        self.cli_as(uid, &["approve", &id.to_string(), "--hash", hash])
    }

    /// How many `exec` records the journal holds for proposal `id`.
    pub fn execs_of(&self, id: u64) -> usize {
        self.journal_events()
            .iter()
            .filter(|e| e["kind"] == "exec" && e["proposal"] == id)
            .count()
    }
}
