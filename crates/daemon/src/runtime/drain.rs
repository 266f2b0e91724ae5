//! Bounded reads for the event loops: every role drains its sockets and its TUN a batch
//! at a time, but never without end, so a flood on one input
//! cannot hold a loop away from the others, its timers and the stop flag.

use crate::io::tun::Tun;
use crate::io::tun_batch::TunReader;
use crate::io::udp_batch::RecvBatch;
use crate::runtime::Failure;
use std::net::SocketAddrV4;

/// Read `batch` until it comes back short or `max_batches` calls were made, handing
/// each datagram to `f` (a coalesced row's one by one). Returns the datagrams read.
pub fn udp(
    batch: &mut RecvBatch,
    max_batches: usize,
    mut f: impl FnMut(SocketAddrV4, &[u8]),
) -> Result<usize, Failure> {
    let mut total = 0;
    for _ in 0..max_batches {
        let n = batch.recv().map_err(|e| Failure::runtime(format!("receive: {e}")))?;
        for i in 0..n {
            let (from, _) = batch.get(i);
            for data in batch.datagrams(i) {
                f(from, data);
                total += 1;
            }
        }
        if n < batch.capacity() {
            break;
        }
    }
    Ok(total)
}

/// Read `tun` until about `max` packets (a super-packet's segments all count) were
/// handed to `f`, or it is empty. Returns the packets read.
pub fn tun(tun: &Tun, reader: &mut TunReader, max: usize, f: impl FnMut(&[u8])) -> Result<usize, Failure> {
    reader.drain(tun, max, f).map_err(|e| Failure::runtime(format!("read {}: {e}", tun.name())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn a_flood_is_read_a_bounded_number_of_batches_at_a_time() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..40u8 {
            tx.send_to(&[i], rx.local_addr().unwrap()).unwrap();
        }
        let mut batch = RecvBatch::new(rx, 8, 64);
        let mut seen = Vec::new();
        assert_eq!(udp(&mut batch, 2, |_, d| seen.push(d[0])).unwrap(), 16, "two batches of eight, no more");
        assert_eq!(udp(&mut batch, 100, |_, d| seen.push(d[0])).unwrap(), 24, "the rest, then a short batch ends it");
        assert_eq!(seen, (0..40).collect::<Vec<u8>>());
    }
}
