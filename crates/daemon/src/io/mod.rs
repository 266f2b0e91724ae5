//! The daemon's I/O floor: the batch interfaces every role's loop reads and writes
//! through (`batch`, with an in-memory backend for tests), UDP sockets in batches (recvmmsg/sendmmsg, segmented
//! sends, coalesced receives), a client's per-peer random ports, socket buffer sizing and
//! options,
//! the TUN device and its batches (offloads: super-packets cut and joined) and
//! rtnetlink, BIRD's control socket. Nothing here knows Teredo; the roles in `cmd/` drive it.

pub mod batch;
pub mod bird;
pub mod kernel_path;
pub mod memory;
pub mod netlink;
pub mod port_mapping;
pub mod random_ports;
pub mod route_watch;
pub mod socket_buffers;
pub mod sockopt;
pub mod tun;
pub mod tun_batch;
pub mod udp_batch;
pub mod udp_socket;
pub mod upnp;
