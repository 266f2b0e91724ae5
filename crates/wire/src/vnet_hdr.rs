//! The virtio-net header (virtio 1.0 §5.1.6, `struct virtio_net_hdr`) that a TUN device
//! opened with `IFF_VNET_HDR` puts before every packet it hands over and expects before
//! every packet it is given. It says whether the checksum is still to be computed
//! (`NEEDS_CSUM`: the packet carries only the pseudo-header's sum, as a NIC with checksum
//! offload would get it) and whether the packet is a super-packet that stands for many
//! (`gso_type`, cut every `gso_size` payload bytes). Fields are little-endian: the
//! daemon asks the device for that byte order (`TUNSETVNETLE`), whatever the host's.

use crate::{Error, Result};

mod field {
    use crate::field::*;

    pub const FLAGS: usize = 0;
    pub const GSO_TYPE: usize = 1;
    pub const HDR_LEN: Field = 2..4;
    pub const GSO_SIZE: Field = 4..6;
    pub const CSUM_START: Field = 6..8;
    pub const CSUM_OFFSET: Field = 8..10;
}

/// Length of the header (without the `num_buffers` of the mergeable-buffers variant,
/// which TUN does not use unless asked).
pub const HEADER_LEN: usize = field::CSUM_OFFSET.end;

/// `flags`: the checksum at `csum_start + csum_offset` holds the pseudo-header's sum
/// only; the rest, from `csum_start` on, is still to be added.
pub const NEEDS_CSUM: u8 = 1;
/// `flags`: the checksum was verified (receive side only; ignored when given).
pub const DATA_VALID: u8 = 2;

/// `gso_type` values.
pub mod gso {
    /// A single packet.
    pub const NONE: u8 = 0;
    /// A TCP over IPv4 super-packet.
    pub const TCPV4: u8 = 1;
    /// A UDP over IPv4 super-packet cut into IP fragments (UFO, obsolete).
    pub const UDP: u8 = 3;
    /// A TCP over IPv6 super-packet: one TCP segment per `gso_size` payload bytes.
    pub const TCPV6: u8 = 4;
    /// A UDP super-packet: one datagram per `gso_size` payload bytes (USO).
    pub const UDP_L4: u8 = 5;
    /// Or'ed into a TCP type: the flow uses ECN, so CWR belongs to the first segment only.
    pub const ECN: u8 = 0x80;
}

/// A virtio-net header's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VnetHdr {
    /// `NEEDS_CSUM` and/or `DATA_VALID`.
    pub flags: u8,
    /// One of [`gso`], possibly with [`gso::ECN`].
    pub gso_type: u8,
    /// Bytes of headers before the first segment's payload (a hint: not trusted).
    pub hdr_len: u16,
    /// Payload bytes per segment of a super-packet.
    pub gso_size: u16,
    /// Where the checksummed part starts (the transport header).
    pub csum_start: u16,
    /// Where the checksum field lies from `csum_start`.
    pub csum_offset: u16,
}

fn read_le16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}

impl VnetHdr {
    /// Read the header at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<VnetHdr> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(VnetHdr {
            flags: buf[field::FLAGS],
            gso_type: buf[field::GSO_TYPE],
            hdr_len: read_le16(&buf[field::HDR_LEN]),
            gso_size: read_le16(&buf[field::GSO_SIZE]),
            csum_start: read_le16(&buf[field::CSUM_START]),
            csum_offset: read_le16(&buf[field::CSUM_OFFSET]),
        })
    }

    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        buf[field::FLAGS] = self.flags;
        buf[field::GSO_TYPE] = self.gso_type;
        buf[field::HDR_LEN].copy_from_slice(&self.hdr_len.to_le_bytes());
        buf[field::GSO_SIZE].copy_from_slice(&self.gso_size.to_le_bytes());
        buf[field::CSUM_START].copy_from_slice(&self.csum_start.to_le_bytes());
        buf[field::CSUM_OFFSET].copy_from_slice(&self.csum_offset.to_le_bytes());
        Ok(HEADER_LEN)
    }

    /// Whether the packet after the header is one plain packet with its checksum done.
    pub const fn is_plain(&self) -> bool {
        self.gso_type == gso::NONE && self.flags & NEEDS_CSUM == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_little_endian_where_linux_puts_them() {
        let h = VnetHdr {
            flags: NEEDS_CSUM,
            gso_type: gso::TCPV6,
            hdr_len: 72,
            gso_size: 1208,
            csum_start: 40,
            csum_offset: 16,
        };
        let mut b = [0u8; HEADER_LEN];
        assert_eq!(h.emit(&mut b), Ok(10));
        assert_eq!(b, [1, 4, 72, 0, 0xb8, 4, 40, 0, 16, 0]);
        assert_eq!(VnetHdr::parse(&b), Ok(h));
        assert_eq!(VnetHdr::parse(&b[..9]), Err(Error::Truncated));
        assert!(VnetHdr::default().is_plain() && !h.is_plain());
    }
}
