//! The operator's audit commands (`verbd audit verify|tail|export|setup-keys|acknowledge-gap`):
//! reading their inputs, rendering their results for a person, and their exit codes. The
//! journal logic itself is in [`verbd::journal`]. Output never contains key material except the
//! verification key `setup-keys` prints once, on purpose.
#![forbid(unsafe_code)]

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use verbd::exit::{EXIT_CHECK_FAILED, EXIT_SUCCESS};
use verbd::journal::{self, JournalError, VerifyKey, VerifyOptions, VerifyReport};

mod tail;
pub use tail::{CallerFilter, RecordOutcome, TailFilter, tail};

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("{0}")]
    Usage(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot render the report: {0}")]
    Render(#[from] serde_json::Error),
}

/// `audit verify`.
pub struct VerifyArgs {
    pub state_dir: PathBuf,
    /// An exported file to check instead of the state directory.
    pub file: Option<PathBuf>,
    /// Verification keys as text (`vk1-…`).
    pub verify_keys: Vec<String>,
    /// Files holding one verification key each; `-` reads standard input.
    pub verify_key_files: Vec<PathBuf>,
    pub witness: Option<PathBuf>,
    pub json: bool,
}

fn read_key_file(path: &Path) -> Result<VerifyKey, AuditError> {
    let mut text = zeroize::Zeroizing::new(String::new());
    let result = if path == Path::new("-") {
        io::stdin().take(4096).read_to_string(&mut text)
    } else {
        std::fs::File::open(path).and_then(|file| file.take(4096).read_to_string(&mut text))
    };
    result.map_err(|source| AuditError::Io {
        what: format!("reading the verification key from {}", path.display()),
        source,
    })?;
    VerifyKey::parse(&text)
        .map_err(|reason| AuditError::Usage(format!("{}: {reason}", path.display())))
}

pub fn verify(
    args: VerifyArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, AuditError> {
    let mut keys = Vec::new();
    for text in &args.verify_keys {
        keys.push(VerifyKey::parse(text).map_err(AuditError::Usage)?);
    }
    for path in &args.verify_key_files {
        keys.push(read_key_file(path)?);
    }
    let with_key = !keys.is_empty();
    let subject = match &args.file {
        Some(file) => file.clone(),
        None => args.state_dir.clone(),
    };
    let report = journal::verify(&VerifyOptions {
        state_dir: args.file.is_none().then(|| args.state_dir.clone()),
        file: args.file.clone(),
        verify_keys: keys,
        witness: args.witness.clone(),
    })?;
    let write = |sink: &mut dyn Write, text: String| {
        sink.write_all(text.as_bytes())
            .map_err(|source| AuditError::Io {
                what: "writing the report".to_owned(),
                source,
            })
    };
    if args.json {
        write(out, serde_json::to_string_pretty(&report)? + "\n")?;
    } else {
        write(out, render(&subject, &report, with_key))?;
        for problem in &report.problems {
            write(err, format!("{problem}\n"))?;
        }
        if !report.is_intact() {
            write(
                err,
                format!(
                    "{}: {} problem(s) in {} records\n",
                    subject.display(),
                    report.problems.len() as u64 + report.problems_omitted,
                    report.records
                ),
            )?;
        }
    }
    Ok(if report.is_intact() {
        EXIT_SUCCESS
    } else {
        EXIT_CHECK_FAILED
    })
}

/// The human report: what holds, then plainly what this check could not prove.
pub fn render(subject: &Path, report: &VerifyReport, with_key: bool) -> String {
    let mut text = String::new();
    let range = match report.first_seq {
        Some(first) => format!("seq {first} to {}", report.last_seq),
        None => "no records".to_owned(),
    };
    if report.is_intact() {
        text.push_str(&format!(
            "{}: {} records, chain and MACs intact ({range}, {} segment(s))\n",
            subject.display(),
            report.records,
            report.segments
        ));
    } else {
        text.push_str(&format!(
            "{}: {} records ({range}, {} segment(s)): NOT intact, see the problems below\n",
            subject.display(),
            report.records,
            report.segments
        ));
    }
    let sealing = &report.sealing;
    text.push_str(&format!(
        "  sealing: {} sealed epoch(s); {} record(s) proven with the verification key{}\n",
        sealing.sealed_epochs,
        sealing.proven_with_verify_key,
        if with_key { "" } else { " (none given)" }
    ));
    for (fingerprint, custody) in &sealing.generations {
        text.push_str(&format!("    key generation {fingerprint} ({custody})\n"));
    }
    if sealing.legacy_verified > 0 {
        text.push_str(&format!(
            "    {} record(s) from before sealing (v1) checked with journal.key\n",
            sealing.legacy_verified
        ));
    }
    match &report.witness {
        Some(witness) => text.push_str(&format!(
            "  witness: {} ({}): {} head(s), last published seq {}, {} compared and matching\n",
            witness.path.display(),
            witness.protection.describe(),
            witness.heads,
            witness
                .last_published_seq
                .map_or("none".to_owned(), |seq| seq.to_string()),
            witness.matched
        )),
        None => text.push_str("  witness: none compared\n"),
    }
    for note in &report.acknowledged {
        text.push_str(&format!("  ACKNOWLEDGED GAP: {note}\n"));
    }
    if !report.not_proven.is_empty() {
        text.push_str("  NOT PROVEN by this check:\n");
        for statement in &report.not_proven {
            text.push_str(&format!("    - {statement}\n"));
        }
    }
    text
}

/// `audit setup-keys`: makes a key generation and prints its verification key once.
pub fn setup_keys(
    state_dir: &Path,
    credential_out: Option<&Path>,
    epoch_records: u64,
    epoch_seconds: u64,
    out: &mut dyn Write,
) -> Result<u8, AuditError> {
    let made = journal::setup_keys(state_dir, credential_out, epoch_records, epoch_seconds)?;
    let key = made.verify_key.display();
    let groups: Vec<&str> = key.split('-').collect();
    let mut text = zeroize::Zeroizing::new(String::new());
    text.push_str("verbd: forward-secure sealing keys made.\n\n");
    match credential_out {
        Some(path) => text.push_str(&format!(
            "The initial sealing key is in {0}. Encrypt it into a systemd credential and remove \
             the plain copy:\n\n    systemd-creds encrypt --name={1} {0} /etc/credstore.encrypted/{1}\n    \
             shred -u {0}\n\nthen add `LoadCredentialEncrypted={1}` to verbd.service \
             (docs/systemd.md).\n\n",
            path.display(),
            journal::CREDENTIAL_NAME
        )),
        None => text.push_str(&format!(
            "The initial sealing key is in {}; the daemon takes it at its next start, starts a \
             new key generation, and erases the file.\n\n",
            made.written_to.display()
        )),
    }
    text.push_str(
        "VERIFICATION KEY. It is shown only this once and kept nowhere on this host. Store it \
         off the host (password manager, paper in a safe): with it `verbd audit verify \
         --verify-key` proves every sealed epoch; whoever holds it can also forge them.\n\n",
    );
    text.push_str(&format!("    {}\n\n", key.as_str()));
    text.push_str("The same key in groups, to copy by hand:\n\n");
    for row in groups.chunks(3) {
        text.push_str(&format!("    {}\n", row.join("  ")));
    }
    if let Ok(code) = qrcode::QrCode::new(key.as_bytes()) {
        text.push_str(
            "\nThe same key as a QR code, to scan into a password manager or a phone (the block \
             characters are the dark modules; most scanners also read the inverted picture a \
             light-on-dark terminal shows):\n\n",
        );
        let picture = zeroize::Zeroizing::new(
            code.render::<qrcode::render::unicode::Dense1x2>()
                .quiet_zone(true)
                .build(),
        );
        text.push_str(&picture);
        text.push('\n');
    }
    text.push_str(&format!(
        "\nKey generation fingerprint: {}\nEpochs close every {} records or {} seconds.\n",
        made.fingerprint, made.epoch_records, made.epoch_seconds
    ));
    out.write_all(text.as_bytes())
        .map_err(|source| AuditError::Io {
            what: "printing the verification key".to_owned(),
            source,
        })?;
    Ok(EXIT_SUCCESS)
}

/// `audit export`: exact lines to a new file or standard output.
pub fn export(
    state_dir: &Path,
    since: u64,
    output: Option<&Path>,
    err: &mut dyn Write,
) -> Result<u8, AuditError> {
    let summary = match output {
        Some(path) => {
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o640)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .map_err(|source| AuditError::Io {
                    what: format!("creating {}", path.display()),
                    source,
                })?;
            let mut writer = io::BufWriter::new(file);
            let summary = journal::export(state_dir, since, &mut writer, path)?;
            writer
                .into_inner()
                .map_err(|error| AuditError::Io {
                    what: format!("writing {}", path.display()),
                    source: error.into_error(),
                })?
                .sync_all()
                .map_err(|source| AuditError::Io {
                    what: format!("writing {}", path.display()),
                    source,
                })?;
            summary
        }
        None => {
            let stdout = io::stdout();
            let mut lock = io::BufWriter::new(stdout.lock());
            journal::export(state_dir, since, &mut lock, Path::new("standard output"))?
        }
    };
    let _ = writeln!(
        err,
        "verbd: exported {} line(s){}; check the copy with `verbd audit verify --file FILE \
         --verify-key …`",
        summary.lines,
        match (summary.first_seq, summary.last_seq) {
            (Some(first), Some(last)) => format!(", seq {first} to {last}"),
            _ => String::new(),
        }
    );
    Ok(EXIT_SUCCESS)
}

/// `audit acknowledge-gap`: puts lost records on record so the daemon serves again.
pub fn acknowledge_gap(
    state_dir: &Path,
    reason: &str,
    out: &mut dyn Write,
) -> Result<u8, AuditError> {
    if reason.trim().is_empty() {
        return Err(AuditError::Usage(
            "--reason must say why the records are gone (it is journaled)".to_owned(),
        ));
    }
    let text = match journal::acknowledge_gap(state_dir, reason)? {
        Some(journal::Acknowledged::MissingRecords { from, to }) => format!(
            "verbd: records seq {from} to {to} are acknowledged as lost; the next start journals \
             this (with your uid and reason) and serves again.\n"
        ),
        Some(journal::Acknowledged::WitnessLost { last }) => format!(
            "verbd: the witness holds no heads; acknowledged that records cut before seq {} \
             cannot be detected. The next start journals this (with your uid and reason), \
             publishes heads again and serves.\n",
            last + 1
        ),
        None => "verbd: no records are missing from the end of the journal; nothing to \
                 acknowledge.\n"
            .to_owned(),
    };
    out.write_all(text.as_bytes())
        .map_err(|source| AuditError::Io {
            what: "printing".to_owned(),
            source,
        })?;
    Ok(EXIT_SUCCESS)
}
