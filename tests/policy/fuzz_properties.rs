//! The fuzz targets' properties on stable Rust, on every `cargo test`: each committed seed of
//! `fuzz/corpus/<target>/` runs through its property, then a bounded number of random mutations
//! of the seeds (bit flips, byte and dictionary insertions, deletions, duplications, splices).
//! The libFuzzer targets in `fuzz/` run the same property functions for as long as one wants
//! (docs/testing.md). `VERBD_FUZZ_ITERATIONS` sets the mutations per target (default 300) and
//! `VERBD_FUZZ_SEED` the seed.
#[path = "../../fuzz/properties.rs"]
mod properties;

use std::path::Path;

/// Tokens the mutator inserts: the syntax each parser cares about.
const DICTIONARY: &[&str] = &[
    "\"",
    "'",
    "\\",
    "\n",
    "\r",
    "\0",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    ";",
    "|",
    "&&",
    "$(",
    "`",
    "..",
    "/",
    " ",
    "\u{1}",
    "U&\"",
    "\\0041",
    "UESCAPE",
    "(table ",
    "select ",
    " from ",
    "--",
    "/*",
    "*/",
    "$$",
    "null",
    "true",
    "1e999",
    "-1",
    "18446744073709551616",
    "\"v\":1",
    "\"op\":\"call\"",
    "[verb.x]",
    "[roles.r]",
    "{seq}",
    "é",
    "\u{202e}",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(data.len() + 1);
        match rng.below(6) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 => {
                let token = DICTIONARY[rng.below(DICTIONARY.len())].as_bytes();
                data.splice(at..at, token.iter().copied());
            }
            2 => {
                let end = (at + rng.below(16)).min(data.len());
                data.drain(at..end);
            }
            3 => {
                let end = (at + rng.below(32)).min(data.len());
                let copy = data[at..end].to_vec();
                data.splice(at..at, copy);
            }
            4 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len() + 1);
                data.truncate(at);
                data.extend_from_slice(&other[from..]);
            }
            _ => data.insert(at.min(data.len()), rng.next() as u8),
        }
    }
    data
}

fn seeds_of(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn run(target: &str) {
    let (_, property) = properties::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .expect("a target of that name");
    let seeds = seeds_of(target);
    assert!(!seeds.is_empty(), "no committed seeds for {target}");
    for seed in &seeds {
        property(seed);
    }
    let iterations: usize = std::env::var("VERBD_FUZZ_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    let seed: u64 = std::env::var("VERBD_FUZZ_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    let mut rng = Rng(seed | 1);
    for _ in 0..iterations {
        let input = mutate(&mut rng, &seeds);
        let result = std::panic::catch_unwind(|| property(&input));
        if let Err(panic) = result {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            panic!("{target}: the property failed on input {input:?}: {message}");
        }
    }
}

#[test]
fn fuzz_wire_request() {
    run("wire_request");
}
#[test]
fn fuzz_wire_response() {
    run("wire_response");
}
#[test]
fn fuzz_policy_loader() {
    run("policy_loader");
}
#[test]
fn fuzz_params() {
    run("params");
}
#[test]
fn fuzz_template_render() {
    run("template_render");
}
#[test]
fn fuzz_sql() {
    run("sql");
}
#[test]
fn fuzz_journal_reader() {
    run("journal_reader");
}
#[test]
fn fuzz_shell_parser() {
    run("shell_parser");
}
#[test]
fn fuzz_transcript_reader() {
    run("transcript_reader");
}
#[test]
fn fuzz_hook_input() {
    run("hook_input");
}
#[test]
fn fuzz_mcp_session() {
    run("mcp_session");
}

#[test]
fn every_target_has_a_test_here_and_a_libfuzzer_target() {
    let source = include_str!("fuzz_properties.rs");
    for (name, _) in properties::TARGETS {
        assert!(
            source.contains(&format!("run(\"{name}\")")),
            "{name} has no test"
        );
        let target = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/fuzz_targets")
            .join(format!("{name}.rs"));
        assert!(target.exists(), "{} is missing", target.display());
    }
}

/// The fixtures the properties use accept ordinary values: `params` and `template_render` check
/// something on accepted calls, not only refusals.
#[test]
fn the_property_fixtures_accept_ordinary_values() {
    let policy = properties::params_policy();
    for (verb, value) in [
        ("p-string", "hello world"),
        ("p-int", "42"),
        ("p-path", "/srv/data/x"),
        ("p-sql", "select 1"),
    ] {
        assert!(
            properties::offline_argv(policy, verb, &[("v", value)]).is_some(),
            "{verb} refused {value:?}"
        );
    }
    assert_eq!(
        properties::offline_argv(
            properties::template_policy(),
            "render",
            &[("a", "x y"), ("b", "$(id)")]
        ),
        Some(vec![
            "/bin/echo".to_owned(),
            "--name=x y".to_owned(),
            "$(id)".to_owned(),
            "xx yy$(id)z".to_owned()
        ])
    );
}
