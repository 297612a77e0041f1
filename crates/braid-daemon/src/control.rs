//! The client side of the control socket: what `braid status` uses.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Ask the daemon behind `socket` for its status, as JSON text.
pub fn query_status(socket: &Path) -> Result<String, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot reach the daemon at {}: {e} (is `braid up` running? pass its control socket with --socket)",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok();
    s.write_all(b"status\n").map_err(|e| e.to_string())?;
    s.shutdown(std::net::Shutdown::Write).ok();
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    Ok(out)
}
