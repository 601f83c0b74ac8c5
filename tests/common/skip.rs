//! Loud skips. A test whose precondition (root, a tool) is missing says so on the real fd 2,
//! not through `eprintln!`, which libtest captures and shows only for failing tests: a skipped
//! test is reported `ok`, so its message must reach the terminal on its own. Under `CI=true` a
//! missing precondition is a failure (a panic), never a skip.
//!
//! Included by every test crate that can skip, as `#[path = "common/skip.rs"] mod skip;` (or
//! through `common`).
#![allow(dead_code)] // each crate uses part of it

use std::io::Write;

/// True when the tests run under CI (`.ci/run` exports `CI=true`).
pub fn under_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// `test` cannot run because `missing`: panic under CI, otherwise print a banner on fd 2.
pub fn skip_or_fail(test: &str, missing: &str) {
    if under_ci() {
        panic!("{test}: {missing}, and CI=true: a missing precondition is a failure");
    }
    announce(&format!(
        "SKIPPED {test}: {missing} (under CI=true this fails)"
    ));
}

/// Write `message` as a banner straight to fd 2 (uncaptured by libtest).
pub fn announce(message: &str) {
    let banner = format!("\n!!! {message} !!!\n");
    let _ = std::io::stderr().lock().write_all(banner.as_bytes());
}
