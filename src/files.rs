//! (interim: types only, until the file verbs land)
use crate::protected::ProtectedNames;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    Write,
    Append,
    Read,
    List,
}

#[derive(Debug, Clone)]
pub struct FileVerbSpec {
    pub op: FileOp,
    pub roots: Vec<PathBuf>,
    pub max_size: u64,
    pub create_only: bool,
    pub allowed_modes: Vec<u32>,
    pub protected: ProtectedNames,
}
