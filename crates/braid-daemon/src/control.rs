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

/// Serve `status` requests on `listener` from a thread, answering with the latest `snapshot`
/// the event loop published. A slow or stuck client only ever holds this thread.
pub(crate) fn serve(
    listener: std::os::unix::net::UnixListener,
    snapshot: std::sync::Arc<std::sync::Mutex<String>>,
) {
    std::thread::Builder::new()
        .name("braid-control".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                s.set_read_timeout(Some(Duration::from_secs(1))).ok();
                s.set_write_timeout(Some(Duration::from_secs(1))).ok();
                let mut req = [0u8; 64];
                let n = s.read(&mut req).unwrap_or(0);
                let body = if String::from_utf8_lossy(&req[..n]).trim() == "status" {
                    snapshot.lock().map(|g| g.clone()).unwrap_or_default()
                } else {
                    "{\"error\":\"unknown request; send `status`\"}".to_owned()
                };
                let _ = s.write_all(body.as_bytes());
            }
        })
        .ok();
}
