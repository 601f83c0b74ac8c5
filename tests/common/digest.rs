//! Digests the tests compute themselves, with the `sha2` and `hmac` crates rather than verbd's
//! own code, to check what the daemon wrote: lower-case hex, SHA-256, HMAC-SHA-256.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    hex(&Sha256::digest(bytes.as_ref()))
}

/// HMAC-SHA-256 of the concatenation of `parts` under `key`.
pub fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}
