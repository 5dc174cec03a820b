//! The admin socket: its directory created, a stale socket replaced, a live one refused, mode
//! 0660.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The admin socket's permissions: owner and group read and write.
pub const SOCKET_MODE: u32 = 0o660;

/// Why the admin socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another live process serves on the socket.
    #[error("{0} is in use by a running process (another quiver?)")]
    InUse(PathBuf),
    /// Something that is not a socket is in the way.
    #[error("{0} exists and is not a socket")]
    NotASocket(PathBuf),
    /// A system call failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> SocketError + 'a {
    move |source| SocketError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Binds the admin socket at `path`: creates its directory, replaces a stale socket (one no
/// process accepts on), refuses a live one, and sets mode 0660.
pub fn bind_socket(path: &Path) -> Result<UnixListener, SocketError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(SocketError::InUse(path.to_path_buf())),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                tracing::info!(socket = %path.display(), "replacing a stale admin socket");
                std::fs::remove_file(path).map_err(io("cannot remove", path))?;
            }
            Err(e) => return Err(io("cannot probe", path)(e)),
        },
        Ok(_) => return Err(SocketError::NotASocket(path.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("cannot inspect", path)(e)),
    }
    let listener = UnixListener::bind(path).map_err(io("cannot bind", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
        .map_err(io("cannot set the mode of", path))?;
    listener
        .set_nonblocking(true)
        .map_err(io("cannot configure", path))?;
    Ok(listener)
}
