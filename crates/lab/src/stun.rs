//! A STUN responder (RFC 5389 Binding, the answer only) on the server host, for the lab's
//! miniupnpd: it refuses to map ports on an external address it cannot call public,
//! and the lab's are documentation ranges; a STUN answer showing that its own traffic
//! leaves unchanged is what it accepts instead ("full-cone NAT 1:1").

use crate::error::{LabError, Result};
use crate::netns;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The STUN port.
pub const PORT: u16 = 3478;
const MAGIC: u32 = 0x2112_A442;
const BINDING_REQUEST: u16 = 0x0001;
const BINDING_SUCCESS: u16 = 0x0101;
const XOR_MAPPED_ADDRESS: u16 = 0x0020;
const MAPPED_ADDRESS: u16 = 0x0001;

/// A running responder; stops when dropped.
pub struct StunResponder {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StunResponder {
    /// Answer Binding requests on `addr` inside namespace `ns`.
    pub fn start(ns: &str, addr: SocketAddrV4) -> Result<StunResponder> {
        let ns = ns.to_string();
        let socket = std::thread::spawn(move || -> Result<UdpSocket> {
            netns::enter(&ns)?;
            let s = UdpSocket::bind(addr).map_err(|e| LabError::new(format!("STUN responder on {addr}: {e}")))?;
            s.set_read_timeout(Some(Duration::from_millis(100))).map_err(|e| LabError::new(e.to_string()))?;
            Ok(s)
        })
        .join()
        .map_err(|_| LabError::new("STUN thread panicked".into()))??;
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 548];
            while !halt.load(Ordering::Relaxed) {
                let Ok((n, SocketAddr::V4(from))) = socket.recv_from(&mut buf) else { continue };
                if let Some(answer) = answer(&buf[..n], from) {
                    let _ = socket.send_to(&answer, from);
                }
            }
        });
        Ok(StunResponder { stop, thread: Some(thread) })
    }
}

impl Drop for StunResponder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The success response to a Binding request from `from`: XOR-MAPPED-ADDRESS and the
/// classic MAPPED-ADDRESS.
fn answer(request: &[u8], from: SocketAddrV4) -> Option<Vec<u8>> {
    if request.len() < 20 || u16::from_be_bytes([request[0], request[1]]) != BINDING_REQUEST {
        return None;
    }
    let ip = u32::from(*from.ip());
    let mut out = Vec::with_capacity(44);
    out.extend_from_slice(&BINDING_SUCCESS.to_be_bytes());
    out.extend_from_slice(&24u16.to_be_bytes());
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.extend_from_slice(&request[8..20]);
    for (kind, port, addr) in
        [(XOR_MAPPED_ADDRESS, from.port() ^ (MAGIC >> 16) as u16, ip ^ MAGIC), (MAPPED_ADDRESS, from.port(), ip)]
    {
        out.extend_from_slice(&kind.to_be_bytes());
        out.extend_from_slice(&8u16.to_be_bytes());
        out.extend_from_slice(&[0, 1]);
        out.extend_from_slice(&port.to_be_bytes());
        out.extend_from_slice(&addr.to_be_bytes());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_answer_carries_the_sender() {
        let mut req = vec![0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42];
        req.extend_from_slice(&[9; 12]);
        let a = answer(&req, "192.0.2.21:40000".parse().unwrap()).unwrap();
        assert_eq!(&a[..4], &[1, 1, 0, 24]);
        assert_eq!(&a[8..20], &[9; 12], "transaction id echoed");
        // XOR-MAPPED-ADDRESS: port 40000 ^ 0x2112, address 192.0.2.21 ^ magic.
        assert_eq!(&a[20..24], &[0, 0x20, 0, 8]);
        assert_eq!(u16::from_be_bytes([a[26], a[27]]), 40000 ^ 0x2112);
        assert_eq!(u32::from_be_bytes([a[28], a[29], a[30], a[31]]) ^ MAGIC, u32::from_be_bytes([192, 0, 2, 21]));
        assert_eq!(&a[38..44], &[0x9c, 0x40, 192, 0, 2, 21]);
        assert!(answer(&[0, 2, 0, 0], "192.0.2.21:1".parse().unwrap()).is_none());
    }
}
