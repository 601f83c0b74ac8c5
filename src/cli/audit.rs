//! `verbd audit verify | tail`: the journal, offline.
#![forbid(unsafe_code)]

use super::EXIT_CHECK_FAILED;
use std::path::PathBuf;
use std::process::ExitCode;

/// Check every record's HMAC and the chain; exit 1 when anything is wrong.
pub fn verify(state_dir: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    let dir = state_dir.unwrap_or_else(verbd::paths::default_state_dir);
    let report = verbd::journal::verify(&dir)?;
    let file = dir.join(verbd::journal::JOURNAL_FILE);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if report.is_intact() {
        println!(
            "{}: {} records, chain and HMACs intact",
            file.display(),
            report.records
        );
    } else {
        for problem in &report.problems {
            eprintln!("{problem}");
        }
        eprintln!(
            "{}: {} problem(s) in {} records",
            file.display(),
            report.problems.len(),
            report.records
        );
    }
    Ok(if report.is_intact() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_CHECK_FAILED)
    })
}

/// The last `n` records, verified, one line each (or JSON).
pub fn tail(state_dir: Option<PathBuf>, n: usize, json: bool) -> anyhow::Result<ExitCode> {
    let dir = state_dir.unwrap_or_else(verbd::paths::default_state_dir);
    for record in &verbd::journal::tail(&dir, n)? {
        if json {
            println!("{}", serde_json::to_string(record)?);
        } else {
            println!("{}", verbd::journal::format_record(record));
        }
    }
    Ok(ExitCode::SUCCESS)
}
