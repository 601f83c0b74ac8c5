//! Extended attributes set and read by path, for the metadata tests of `verbd exec` (the
//! files of the agent's project, and of its home outside every write root).

use std::path::Path;

/// Set `name` to `value` on `path` (following symlinks); panics on failure.
pub fn xattr_set(path: &Path, name: &str, value: &[u8]) {
    let path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings and a buffer of the given length, alive for the call.
    let rc = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

/// The value of an extended attribute, `None` when it is absent.
pub fn xattr_get(path: &Path, name: &str) -> Option<Vec<u8>> {
    let path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let name = std::ffi::CString::new(name).unwrap();
    let mut buffer = vec![0u8; 4096];
    // SAFETY: NUL-terminated strings and a writable buffer of the given length.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
        )
    };
    (n >= 0).then(|| buffer[..n as usize].to_vec())
}
