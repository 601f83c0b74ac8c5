//! `verbd audit …`: the journal, offline. The work (verify, seal keys, export, gap
//! acknowledgement, tail) and its rendering for a person live in `report`; this module holds the
//! clap types and maps the result to an exit code. The journal logic itself is the library's
//! (`verbd::journal`).
#![forbid(unsafe_code)]

pub mod report;

use std::path::PathBuf;
use std::process::ExitCode;

/// `verbd audit …`
#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum AuditCommand {
    /// Check every segment: hash chain, sequence, epochs and seals, the heads published to the
    /// witness, and (with --verify-key) every sealed epoch's MACs; names each edited, deleted,
    /// inserted, reordered or cut-off record and says what it could not prove. Exit 1 when
    /// anything is wrong.
    Verify {
        /// The daemon's state directory (default: as `verbd serve` chooses it)
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Check an exported file (`audit export`) instead of the state directory
        #[arg(long)]
        file: Option<PathBuf>,
        /// The verification key `audit setup-keys` printed (repeat for several generations;
        /// visible to local users in the process list, see --verify-key-file)
        #[arg(long)]
        verify_key: Vec<String>,
        /// A file holding a verification key (`-` reads standard input)
        #[arg(long)]
        verify_key_file: Vec<PathBuf>,
        /// A witness file to compare with (default: the state directory's)
        #[arg(long)]
        witness: Option<PathBuf>,
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
    },
    /// Make forward-secure sealing keys: the initial sealing key goes to the state directory
    /// (taken at the next daemon start) or to a file for a systemd credential; the
    /// verification key is printed once
    SetupKeys {
        /// The daemon's state directory (default: as `verbd serve` chooses it)
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Write the initial sealing key to this new file (for `systemd-creds encrypt`)
        /// instead of the state directory
        #[arg(long)]
        credential: Option<PathBuf>,
        /// Close an epoch after this many records
        #[arg(long, default_value_t = verbd::journal::DEFAULT_EPOCH_RECORDS)]
        epoch_records: u64,
        /// Close an epoch after this many seconds
        #[arg(long, default_value_t = verbd::journal::DEFAULT_EPOCH_SECONDS)]
        epoch_seconds: u64,
    },
    /// Write the journal's exact lines (all segments) for offline checking or a SIEM
    Export {
        /// The daemon's state directory (default: as `verbd serve` chooses it)
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Start at the first record with this seq or higher
        #[arg(long, default_value_t = 1)]
        since: u64,
        /// The output format
        #[arg(long, value_enum, default_value = "jsonl")]
        format: ExportFormat,
        /// A new file to write (default: standard output)
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Acknowledge records missing from the end of the journal so the daemon serves again;
    /// the acknowledgement (who, why, which records) is journaled at the next start
    AcknowledgeGap {
        /// The daemon's state directory (default: as `verbd serve` chooses it)
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Why the records are gone (journaled with your uid)
        #[arg(long)]
        reason: String,
    },
    /// Show the most recent records, each verified (hash chain, sequence, epochs, MACs under
    /// the keys this host can read); with --follow, then every record journaled from then on,
    /// verified as it comes. The filters combine (all must match).
    Tail {
        /// The daemon's state directory (default: as `verbd serve` chooses it)
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// How many of the last matching records to show first
        #[arg(short = 'n', default_value_t = 20)]
        n: usize,
        /// Print each record as the journal's JSON
        #[arg(long)]
        json: bool,
        /// Keep printing records as they are journaled (across daemon restarts and segment
        /// rotations), verifying each; a problem in the journal ends it, named
        #[arg(long, short = 'f')]
        follow: bool,
        /// Only records of this verb (and the results and decisions that continue them)
        #[arg(long)]
        verb: Option<String>,
        /// Only records of this caller, a uid or a user name (the requester, for a proposal)
        #[arg(long, value_name = "UID|USER")]
        caller: Option<String>,
        /// Only records with this outcome
        #[arg(long, value_enum)]
        outcome: Option<report::RecordOutcome>,
        /// Only records at or after this time: RFC 3339 (2026-12-01T08:00:00Z) or an age
        /// (30m, 2h, 1d)
        #[arg(long, value_name = "TIME|AGE")]
        since: Option<String>,
    },
}

/// Formats of `audit export`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ExportFormat {
    /// One record per line, byte for byte as journaled
    Jsonl,
}

/// Runs one `verbd audit` subcommand.
pub fn run(command: AuditCommand) -> anyhow::Result<ExitCode> {
    let dir =
        |state_dir: Option<PathBuf>| state_dir.unwrap_or_else(verbd::paths::default_state_dir);
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    let code = match command {
        AuditCommand::Verify {
            state_dir,
            file,
            verify_key,
            verify_key_file,
            witness,
            json,
        } => report::verify(
            report::VerifyArgs {
                state_dir: dir(state_dir),
                file,
                verify_keys: verify_key,
                verify_key_files: verify_key_file,
                witness,
                json,
            },
            &mut out,
            &mut err,
        ),
        AuditCommand::Tail {
            state_dir,
            n,
            json,
            follow,
            verb,
            caller,
            outcome,
            since,
        } => {
            let filter = report::TailFilter {
                verb,
                caller: caller.as_deref().map(report::CallerFilter::parse),
                outcome,
                since: since
                    .as_deref()
                    .map(report::TailFilter::parse_since)
                    .transpose()?,
            };
            report::tail(&dir(state_dir), n, json, filter, follow, &mut out)
        }
        AuditCommand::SetupKeys {
            state_dir,
            credential,
            epoch_records,
            epoch_seconds,
        } => report::setup_keys(
            &dir(state_dir),
            credential.as_deref(),
            epoch_records,
            epoch_seconds,
            &mut out,
        ),
        AuditCommand::Export {
            state_dir,
            since,
            format: ExportFormat::Jsonl,
            output,
        } => report::export(&dir(state_dir), since, output.as_deref(), &mut err),
        AuditCommand::AcknowledgeGap { state_dir, reason } => {
            report::acknowledge_gap(&dir(state_dir), &reason, &mut out)
        }
    };
    Ok(ExitCode::from(code?))
}
