//! (interim: minimal store until the secrets module lands)
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    File(PathBuf),
    Credential(String),
    Env(String),
}

pub struct SecretValue(Vec<u8>);
impl SecretValue {
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

#[derive(Debug, thiserror::Error)]
#[error("secret error: {0}")]
pub struct SecretError(String);

#[derive(Default)]
pub struct SecretStore(BTreeMap<String, SecretValue>);
impl SecretStore {
    pub fn empty() -> Self {
        Self::default()
    }
    pub fn load(sources: &BTreeMap<String, SecretSource>) -> Result<SecretStore, SecretError> {
        if sources.is_empty() {
            Ok(Self::empty())
        } else {
            Err(SecretError("secrets not available yet".into()))
        }
    }
    pub fn get(&self, name: &str) -> Option<&SecretValue> {
        self.0.get(name)
    }
    pub fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}

pub struct SecretFile(PathBuf);
impl SecretFile {
    pub fn create(
        _dir: &Path,
        _name: &str,
        _value: &SecretValue,
        _owner: Option<(u32, u32)>,
    ) -> Result<SecretFile, SecretError> {
        Err(SecretError("secret files not available yet".into()))
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}
