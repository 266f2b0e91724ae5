//! TCP header (RFC 9293 §3.1): what the TUN offloads need to cut a super-packet into
//! segments and to join segments into one (ports, sequence and acknowledgement numbers,
//! flags, window, options, checksum). The tunnel never terminates TCP.

use crate::{read_u16, read_u32, write_u16, write_u32, Error, Result};

mod field {
    use crate::field::*;

    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ: Field = 4..8;
    pub const ACK: Field = 8..12;
    pub const DATA_OFFSET: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
}

/// Length of a TCP header without options.
pub const HEADER_LEN: usize = field::URGENT.end;
/// Where the checksum lies from the start of the header.
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM.start;

/// TCP flag bits (the byte at offset 13).
pub mod flags {
    /// No more data from the sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push: hand the data to the application now.
    pub const PSH: u8 = 0x08;
    /// The acknowledgement number is valid.
    pub const ACK: u8 = 0x10;
    /// The urgent pointer is valid.
    pub const URG: u8 = 0x20;
    /// ECN echo.
    pub const ECE: u8 = 0x40;
    /// Congestion window reduced.
    pub const CWR: u8 = 0x80;
}

/// A view over a TCP segment (header and payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wrap a buffer without checking it; accessors may panic until checked.
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// Wrap an untrusted buffer: after this succeeds no accessor can panic.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        let b = p.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = p.header_len();
        if hl < HEADER_LEN {
            return Err(Error::BadLength);
        }
        if hl > b.len() {
            return Err(Error::Truncated);
        }
        Ok(p)
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::SRC_PORT])
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::DST_PORT])
    }
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::SEQ])
    }
    /// Acknowledgement number.
    pub fn ack(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::ACK])
    }
    /// Header length in bytes, options included (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFFSET] >> 4) * 4
    }
    /// The flag byte ([`flags`]).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Receive window.
    pub fn window(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::WINDOW])
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }
    /// The options (between the fixed header and the payload).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Set the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        write_u32(&mut self.buffer.as_mut()[field::SEQ], v);
    }
    /// Set the flag byte.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::CHECKSUM], v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_with_options_is_read_where_its_data_offset_says() {
        let mut b = [0u8; 36];
        b[0..4].copy_from_slice(&[0x1f, 0x90, 0xc0, 0x01]);
        b[4..8].copy_from_slice(&1000u32.to_be_bytes());
        b[12] = 8 << 4; // 32 bytes of header: 12 of options
        b[13] = flags::ACK | flags::PSH;
        let mut t = TcpPacket::new_checked(&mut b[..]).unwrap();
        assert_eq!((t.src_port(), t.dst_port(), t.seq(), t.header_len()), (8080, 0xc001, 1000, 32));
        assert_eq!((t.options().len(), t.payload().len()), (12, 4));
        t.set_seq(7);
        assert_eq!(t.seq(), 7);
        b[12] = 4 << 4;
        assert_eq!(TcpPacket::new_checked(&b[..]).unwrap_err(), Error::BadLength);
        b[12] = 10 << 4;
        assert_eq!(TcpPacket::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        assert_eq!(TcpPacket::new_checked(&b[..19]).unwrap_err(), Error::Truncated);
    }
}
