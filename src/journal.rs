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
