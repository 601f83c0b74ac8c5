//! An idle daemon hands back the pages its calls touched, once per quiet spell, and serves
//! the next call as before.
use crate::common;
use common::policy::{Category, Policy, Verb};
use common::*;
use std::time::{Duration, Instant};
use verbd::server::idle::IDLE_RELEASE_AFTER;

/// KiB of `pid`'s resident set backed by files (the binary and its libraries): `Rss` less
/// `Anonymous` in its `smaps_rollup`.
fn file_resident_kib(pid: u32) -> u64 {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    let field = |name: &str| -> u64 {
        rollup
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {rollup}"))
    };
    field("Rss:") - field("Anonymous:")
}

/// Minor page faults of `pid` (all its threads) so far: a page mapped again, from the page cache.
fn minor_faults(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name's closing parenthesis: state is the first, minflt the
    // eighth.
    let after_name = stat.rsplit_once(')').unwrap().1;
    after_name
        .split_whitespace()
        .nth(7)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn an_idle_daemon_hands_back_the_pages_its_calls_touched() {
    if !require_root("the daemon's memory maps") {
        return;
    }
    let policy = Policy::new()
        .allow_root()
        .agents("me", &[0])
        .verb(
            "hello",
            Verb::command(Category::ReadOnly, "/bin/echo hello")
                .description("a call that touches the daemon's call path")
                .roles(&["me"]),
        )
        .render();
    let d = Daemon::start(&policy);
    let pid = d.child.as_ref().unwrap().id();
    let hello = || assert_eq!(stdout_of(&d.call("hello", &[])), "hello\n");
    for _ in 0..20 {
        hello();
    }
    // While calls keep coming (one every 300 ms, longer than a quiet spell in all), nothing
    // is handed back: those calls find their pages resident, and all of them together fault
    // fewer pages back in than the one call after a quiet spell will.
    let faults_before_serving = minor_faults(pid);
    let serving_until = Instant::now() + IDLE_RELEASE_AFTER + Duration::from_secs(2);
    let mut serving_calls = 0;
    while Instant::now() < serving_until {
        hello();
        serving_calls += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    let serving_faults = minor_faults(pid) - faults_before_serving;
    let before_quiet = file_resident_kib(pid);
    // Quiet: within the spell and a few checks, at most half stays resident.
    let deadline = Instant::now() + IDLE_RELEASE_AFTER + Duration::from_secs(10);
    let released = loop {
        let now = file_resident_kib(pid);
        if now * 2 <= before_quiet {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "an idle daemon kept {now} KiB of files resident ({before_quiet} KiB when the calls \
             stopped) after {:?}",
            IDLE_RELEASE_AFTER + Duration::from_secs(10)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    println!("file pages resident: {before_quiet} KiB when the calls stopped, {released} KiB idle");
    // The next call brings back what it needs and answers the same.
    let faults_before_call = minor_faults(pid);
    hello();
    let call_faults = minor_faults(pid) - faults_before_call;
    println!(
        "minor faults: {serving_faults} in {serving_calls} calls while serving, {call_faults} in \
         the call after the quiet spell"
    );
    assert!(
        file_resident_kib(pid) > released,
        "the call after the quiet spell mapped nothing again"
    );
    assert!(
        serving_faults < call_faults,
        "pages were handed back while calls kept coming: {serving_faults} minor faults in \
         {serving_calls} calls, against {call_faults} in one call after a quiet spell"
    );
}
