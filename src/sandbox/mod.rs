//! (interim: types only, until the sandbox lands)
use crate::protected::ProtectedNames;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    None,
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimits {
    pub cpu_seconds: u64,
    pub address_space_bytes: u64,
    pub file_size_bytes: u64,
    pub open_files: u64,
    pub processes: u64,
}

impl Default for Rlimits {
    fn default() -> Self {
        Rlimits {
            cpu_seconds: 60,
            address_space_bytes: 4 << 30,
            file_size_bytes: 1 << 30,
            open_files: 256,
            processes: 256,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

#[derive(Debug, Clone)]
pub struct SandboxSpec {
    pub name: String,
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub protected: ProtectedNames,
    pub network: Network,
    pub keep_capabilities: Vec<caps::Capability>,
    pub rlimits: Rlimits,
    pub umask: u32,
    pub run_as: Option<RunAs>,
}

#[derive(Debug, thiserror::Error)]
#[error("sandbox error")]
pub struct SandboxError;

pub struct PreparedSandbox(SandboxSpec);
impl PreparedSandbox {
    pub fn prepare(spec: SandboxSpec) -> Result<PreparedSandbox, SandboxError> {
        Ok(PreparedSandbox(spec))
    }
    pub fn spec(&self) -> &SandboxSpec {
        &self.0
    }
    pub fn install(&self, cmd: &mut tokio::process::Command) -> Result<(), SandboxError> {
        cmd.process_group(0);
        Ok(())
    }
}

pub struct Stage;
impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stage")
    }
}
pub fn stage_of_spawn_error(_e: &std::io::Error) -> Option<Stage> {
    None
}
