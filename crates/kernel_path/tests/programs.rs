//! The programs run by the kernel (`BPF_PROG_TEST_RUN`) on crafted and mutated
//! packets, against the relay's and the client's state machines given the same packet:
//! whatever the kernel moves, the state machine would have moved byte for byte the same
//! way, and whatever else it leaves untouched for userland. Needs root (CI runs as root):
//! run by a user, each test says it skipped and passes, as the end-to-end suite does;
//! with `SHIPWORM_E2E=required` (the test command's) it fails instead.

use shipworm_kernel_path::{monotonic_ns, Counter, KernelPath, Program, RouteVerdicts, Settings};
use shipworm_proto::client::{Client, ClientConfig, ClientEvent, ServerAddrs, Via};
use shipworm_proto::relay::{Relay, RelayConfig};
use shipworm_proto::server::{Local, Server, ServerConfig};
use shipworm_proto::transmit::{KernelModel, Random, Recorder, Sent, Source};
use shipworm_proto::Action;
use shipworm_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use shipworm_wire::ipv6::Ipv6Repr;
use shipworm_wire::teredo_packet::emit_bubble;
use shipworm_wire::udp::{UdpPacket, UdpRepr};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::process::Command;
use std::time::Duration;

const XDP_PASS: u32 = 2;
const TC_ACT_OK: u32 = 0;
const TC_ACT_REDIRECT: u32 = 7;

const RELAY_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// Client C: server 65.54.227.120, mapped 192.0.2.45:40000, cone.
const C: &str = "2001:0:4136:e378:8000:63bf:3fff:fdd2";
const C_MAPPED: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 45), 40000);
const NATIVE: &str = "2001:db8::5";

/// Whether the programs can be loaded here (root); otherwise the test is skipped, said
/// on stderr, unless the test command asked for every test (`SHIPWORM_E2E=required`).
fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var("SHIPWORM_E2E").map_or(true, |v| v != "required"),
        "the kernel data path's tests need root (CAP_BPF, CAP_NET_ADMIN); SHIPWORM_E2E=required"
    );
    eprintln!("skipped: the kernel data path's tests need root (CAP_BPF, CAP_NET_ADMIN)");
    false
}

fn a(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// The state machines' figures, as the daemon hands them to the programs.
fn contract() -> shipworm_kernel_path::Contract {
    shipworm_proto::kernel_figures::KERNEL_FIGURES.into()
}

fn settings() -> Settings {
    Settings::relay(RELAY_V4, 1024, contract())
}

fn ipv6(src: &str, dst: &str, hop_limit: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; 40];
    Ipv6Repr { src_addr: a(src), dst_addr: a(dst), next_header: 17, payload_len: payload.len(), hop_limit }
        .emit(&mut v)
        .unwrap();
    v.extend_from_slice(payload);
    v
}

/// The ones' complement sum of `bytes` (an odd last byte padded), unfolded.
fn sum16(bytes: &[u8]) -> u32 {
    bytes.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))).sum()
}

fn fold16(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Whether IPv6 packet `p`'s own transport checksum (TCP, UDP, ICMPv6 right after the
/// header) holds; None for another next header, or a UDP packet without one or whose
/// length is not the payload's.
fn inner_sum_holds(p: &[u8]) -> Option<bool> {
    let (nh, len, body) = (p[6], u16::from_be_bytes([p[4], p[5]]), &p[40..]);
    let at = match nh {
        6 => 16,
        17 => 6,
        58 => 2,
        _ => return None,
    };
    if nh == 17 && (body.get(at..at + 2) == Some(&[0, 0]) || body.get(4..6) != Some(&len.to_be_bytes()[..])) {
        return None;
    }
    Some(fold16(sum16(&p[8..40]) + u32::from(len) + u32::from(nh) + sum16(body)) == 0xffff)
}

/// IPv6 packet `p` with its transport checksum made right (TCP, UDP, ICMPv6).
fn with_inner_sum(mut p: Vec<u8>) -> Vec<u8> {
    let at = 40
        + match p[6] {
            6 => 16,
            17 => 6,
            _ => 2,
        };
    p[at..at + 2].copy_from_slice(&[0, 0]);
    let len = u16::from_be_bytes([p[4], p[5]]);
    if p[6] == 17 {
        p[44..46].copy_from_slice(&len.to_be_bytes());
    }
    let sum = !fold16(sum16(&p[8..40]) + u32::from(len) + u32::from(p[6]) + sum16(&p[40..]));
    p[at..at + 2].copy_from_slice(&(if sum == 0 { 0xffff } else { sum }).to_be_bytes());
    p
}

/// The outer UDP header of a datagram the kernel path sent from `from` to `to`, around
/// IPv6 packet `inner`: its ports, after checking its checksum, which the programs
/// derive from the inner packet's own, so that it holds exactly when that one does,
/// and is none (zero) where there is none to derive it from.
fn outer_udp(name: &str, ip: &Ipv4Packet<&[u8]>, from: Ipv4Addr, to: Ipv4Addr, inner: &[u8]) -> (u16, u16) {
    let udp = UdpPacket::new_checked(ip.payload()).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    let d = udp.into_inner();
    let check = u16::from_be_bytes([d[6], d[7]]);
    let pseudo = sum16(&from.octets()) + sum16(&to.octets()) + 17 + d.len() as u32;
    let holds = fold16(pseudo + sum16(d)) == 0xffff;
    match inner_sum_holds(inner) {
        None => assert_eq!(check, 0, "{name}: an outer sum where the inner packet gives none"),
        Some(inner_holds) => {
            assert_eq!(holds, inner_holds, "{name}: the outer sum holds, the inner's does not, or the reverse")
        }
    }
    (u16::from_be_bytes([d[0], d[1]]), u16::from_be_bytes([d[2], d[3]]))
}

/// UDP packet `p` with its UDP length 4 bytes short of its payload (its sum then covers
/// less than the packet carries).
fn short_udp(mut p: Vec<u8>) -> Vec<u8> {
    let len = u16::from_be_bytes([p[44], p[45]]) - 4;
    p[44..46].copy_from_slice(&len.to_be_bytes());
    p
}

/// An ICMPv6 echo request of `n` data bytes, its checksum left zero.
fn icmp6(src: &str, dst: &str, n: usize) -> Vec<u8> {
    let mut m = vec![128, 0, 0, 0, 0x12, 0x34, 0, 1];
    m.extend(std::iter::repeat_n(0x5a, n));
    let mut p = ipv6(src, dst, 64, &m);
    p[6] = 58;
    p
}

/// An IPv6 TCP segment from `src` to `dst` carrying `data`, its checksum left zero.
fn tcp6(src: &str, dst: &str, data: &[u8]) -> Vec<u8> {
    let mut segment = vec![0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0];
    segment.extend_from_slice(data);
    let mut p = ipv6(src, dst, 64, &segment);
    p[6] = 6;
    p
}

/// `tcp6`'s segment as a sender on the host leaves it for its NIC to finish: the
/// checksum field holding the pseudo-header's sum alone.
fn tcp6_pending(src: &str, dst: &str, data: &[u8]) -> Vec<u8> {
    let mut p = tcp6(src, dst, data);
    let len = u16::from_be_bytes([p[4], p[5]]);
    let pseudo = fold16(sum16(&p[8..40]) + u32::from(len) + 6);
    p[56..58].copy_from_slice(&pseudo.to_be_bytes());
    p
}

fn udp6(src: &str, dst: &str) -> Vec<u8> {
    ipv6(src, dst, 64, &[0x12, 0x34, 0x56, 0x78, 0, 12, 0, 0, 1, 2, 3, 4])
}

/// An Ethernet frame carrying `datagram` from `from` to the relay's service port.
fn frame(from: SocketAddrV4, datagram: &[u8]) -> Vec<u8> {
    frame_to(from, SocketAddrV4::new(RELAY_V4, 3544), datagram)
}

/// An Ethernet frame carrying `datagram` from `from` to `to`.
fn frame_to(from: SocketAddrV4, to: SocketAddrV4, datagram: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 28 + datagram.len()];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[42..].copy_from_slice(datagram);
    let udp = UdpRepr { src_port: from.port(), dst_port: to.port(), payload_len: datagram.len() };
    udp.emit(from.ip(), to.ip(), &mut f[34..]).unwrap();
    let ip =
        Ipv4Repr { src_addr: *from.ip(), dst_addr: *to.ip(), protocol: 17, payload_len: 8 + datagram.len(), ttl: 60 };
    ip.emit(&mut f[14..]).unwrap();
    f
}

/// A relay that trusts C at its mapping (C's own first packet), and the kernel's list
/// as the relay filled it.
fn relay_trusting_c() -> (Relay, Recorder) {
    let mut r = Relay::new(RelayConfig {
        kernel_path: true,
        hash_keys: (3, 4),
        own_ipv4: vec![RELAY_V4],
        ..RelayConfig::default()
    });
    let mut w = Recorder { kernel: Some(KernelModel::default()), ..Recorder::default() };
    assert_eq!(r.on_udp_answered(Duration::from_secs(10), C_MAPPED, &udp6(C, NATIVE), &mut w), Ok(Action::Forwarded));
    (r, w)
}

fn load_with(w: &Recorder) -> KernelPath {
    let k = KernelPath::load(&settings()).unwrap_or_else(|e| panic!("{e}"));
    let peers = k.peers();
    let model = w.kernel.as_ref().unwrap();
    assert!(!model.peers.is_empty(), "the relay trusted no one");
    for (addr, (mapped, _)) in &model.peers {
        peers.trust(addr, *mapped, monotonic_ns()).unwrap();
    }
    k
}

/// Deterministic xorshift, so that a failure can be run again.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Datagrams from C's mapping (and a few from elsewhere): plain packets to every kind
/// of destination, and every shape the relay must see itself.
fn decap_cases() -> Vec<(String, SocketAddrV4, Vec<u8>)> {
    let mut v: Vec<(String, SocketAddrV4, Vec<u8>)> = Vec::new();
    let mut add = |name: &str, from: SocketAddrV4, d: Vec<u8>| v.push((name.to_owned(), from, d));
    for dst in [
        NATIVE,
        "2001:4860::8888",
        "2a00:1450::1",
        "3fff::1",
        "2002:c000:201::1",            // 6to4 of the relay's own address
        "2002:cb00:7101::1",           // someone else's 6to4
        "2001:db8::200:5efe:c000:201", // ISATAP
        "2001:0:4136:e378::1",         // Teredo
        "fe80::1",
        "ff02::1",
        "::1",
        "::",
        "fd00::1",
        "::ffff:192.0.2.9",
        "fec0::1",
    ] {
        add(&format!("to {dst}"), C_MAPPED, udp6(C, dst));
    }
    add("hop limit 1", C_MAPPED, ipv6(C, NATIVE, 1, &[0; 8]));
    add("hop limit 0", C_MAPPED, ipv6(C, NATIVE, 0, &[0; 8]));
    add("hop limit 2", C_MAPPED, ipv6(C, NATIVE, 2, &[0; 8]));
    let mut bubble = vec![0u8; 40];
    emit_bubble(&a(C), &a(NATIVE), 64, &mut bubble).unwrap();
    add("bubble", C_MAPPED, bubble);
    let mut origin = vec![0, 0, 0x63, 0xbf, 0x3f, 0xff, 0xfd, 0xd2];
    origin.extend(udp6(C, NATIVE));
    add("origin indication", C_MAPPED, origin);
    let mut trailer = udp6(C, NATIVE);
    trailer.extend([0x01, 0x04, 1, 2, 3, 4]);
    add("nonce trailer", C_MAPPED, trailer);
    let mut short = udp6(C, NATIVE);
    short.truncate(45);
    add("truncated", C_MAPPED, short);
    let mut padded = udp6(C, NATIVE);
    padded.push(0);
    add("one byte more", C_MAPPED, padded);
    add("header only", C_MAPPED, udp6(C, NATIVE)[..40].to_vec());
    add("empty", C_MAPPED, Vec::new());
    add("from another port", SocketAddrV4::new(*C_MAPPED.ip(), 40001), udp6(C, NATIVE));
    add("from another address", SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 46), 40000), udp6(C, NATIVE));
    add("an unknown client", C_MAPPED, udp6("2001:0:4136:e378:8000:63bf:3fff:fdd3", NATIVE));
    add("a native source", C_MAPPED, udp6(NATIVE, "2001:4860::8888"));
    let mut v6 = udp6(C, NATIVE);
    v6[0] = 0x70;
    add("version 7", C_MAPPED, v6);
    // What the fuzzers start from.
    for dir in ["teredo_payload", "ipv6_packet", "trailers"] {
        let path = format!("{}/../../fuzz/seeds/{dir}", env!("CARGO_MANIFEST_DIR"));
        for e in std::fs::read_dir(&path).unwrap_or_else(|e| panic!("{path}: {e}")) {
            let e = e.unwrap();
            add(&format!("seed {dir}/{}", e.file_name().to_string_lossy()), C_MAPPED, std::fs::read(e.path()).unwrap());
        }
    }
    v
}

/// Runs the decapsulation on one datagram; asserts it against the relay. Returns
/// whether the kernel moved it.
fn check_decap(k: &mut KernelPath, r: &mut Relay, w: &mut Recorder, name: &str, from: SocketAddrV4, d: &[u8]) -> bool {
    check_frame(k, r, w, name, &frame(from, d))
}

/// Runs the tc ingress program on `input` as if it arrived on interface `ifindex`; `None`
/// for a frame cut inside its IPv4 or IPv6 header, for which the kernel's test run
/// builds no socket buffer (nor would a receive).
fn tc_ingress(k: &mut KernelPath, ifindex: u32, name: &str, input: &[u8]) -> Option<shipworm_kernel_path::TestRun> {
    let header = if input.get(12..14) == Some(&[0x86, 0xdd]) { 40 } else { 20 };
    match k.test_run(Program::TcIngress(ifindex), input) {
        Ok(out) => Some(out),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && input.len() < 14 + header => None,
        Err(e) => panic!("{name}: tc test run: {e}"),
    }
}

/// Runs the decapsulation, in XDP and at tc ingress, on one Ethernet frame; asserts it
/// against what the host and the relay would do with it. Returns whether it moved.
fn check_frame(k: &mut KernelPath, r: &mut Relay, w: &mut Recorder, name: &str, input: &[u8]) -> bool {
    let out = k.test_run(Program::DecapXdp, input).unwrap();
    assert_eq!(out.verdict, XDP_PASS, "{name}: every packet goes on, moved or not");
    // At tc ingress the same packet comes out the same.
    if let Some(tc) = tc_ingress(k, 0, name, input) {
        assert_eq!((tc.verdict, &tc.packet), (TC_ACT_OK, &out.packet), "{name}: tc ingress and XDP differ")
    }
    if out.packet == input {
        return false;
    }
    // Moved: the host's IPv4 receive would have taken the frame (a whole IPv4 header
    // with its checksum right, UDP to the relay's port, its length the packet's; the
    // UDP checksum is the one thing the kernel path does not check, docs/data-path.md),
    // and the relay forwards its payload from that source byte for byte so, behind the
    // same Ethernet addresses with the IPv6 type.
    let ip = Ipv4Packet::new_checked(&input[14..]).unwrap_or_else(|e| panic!("{name}: moved a bad IPv4 header: {e:?}"));
    let repr = Ipv4Repr::parse(&ip).unwrap_or_else(|e| panic!("{name}: moved a bad IPv4 header: {e:?}"));
    assert_eq!((ip.header_len(), repr.protocol, repr.dst_addr), (20, 17, RELAY_V4), "{name}");
    let udp = UdpPacket::new_checked(ip.payload()).unwrap_or_else(|e| panic!("{name}: moved a bad UDP header: {e:?}"));
    assert_eq!((udp.dst_port(), usize::from(udp.len())), (3544, ip.payload().len()), "{name}");
    let from = SocketAddrV4::new(repr.src_addr, udp.src_port());
    w.delivered.clear();
    w.sent.clear();
    let proto = r.on_udp_answered(Duration::from_secs(11), from, udp.payload(), w);
    assert_eq!(proto, Ok(Action::Forwarded), "{name}: the kernel moved what the relay does not forward");
    assert_eq!(w.delivered.len(), 1, "{name}");
    let mut want = input[..12].to_vec();
    want.extend([0x86, 0xdd]);
    want.extend(&w.delivered[0]);
    // Bytes after the IPv4 packet (a frame's padding) stay behind the IPv6 packet,
    // for the host's stack to trim as it trims them from any frame.
    want.extend(&input[14 + usize::from(repr_total_len(&input[14..]))..]);
    assert_eq!(out.packet, want, "{name}: not what the relay delivers");
    true
}

/// An IPv4 header's total length field.
fn repr_total_len(ip: &[u8]) -> u16 {
    u16::from_be_bytes([ip[2], ip[3]])
}

#[test]
fn decapsulation_moves_only_what_the_relay_forwards_and_exactly_so() {
    if !root() {
        return;
    }
    let (mut r, mut w) = relay_trusting_c();
    let mut k = load_with(&w);
    let before = k.counters().unwrap();
    let mut moved = Vec::new();
    for (name, from, d) in decap_cases() {
        if check_decap(&mut k, &mut r, &mut w, &name, from, &d) {
            moved.push(name);
        }
    }
    // Plain packets to native destinations move; nothing else does.
    assert_eq!(
        moved,
        ["to 2001:db8::5", "to 2001:4860::8888", "to 2a00:1450::1", "to 3fff::1", "hop limit 2"],
        "what the kernel moved"
    );
    let after = k.counters().unwrap();
    let delta = |c: Counter| after[c as usize] - before[c as usize];
    // Each case ran twice, in XDP and at tc ingress.
    assert_eq!(delta(Counter::DecapForwarded), 2 * 5);
    assert_eq!(delta(Counter::DecapOtherMapping), 2 * 2);
    assert!(delta(Counter::DecapNotPlain) >= 2 * 8, "{}", delta(Counter::DecapNotPlain));
    assert_eq!(delta(Counter::DecapHopLimit), 2 * 2);

    // A datagram whose UDP checksum is still to be taken (a local sender's, through a
    // veth: the field holds the pseudo-header's sum alone) goes to the socket; one with
    // no checksum (zero: ours, and RFC 768's "none") moves, as a whole checksum does.
    let base = frame(C_MAPPED, &udp6(C, NATIVE));
    let pseudo = |f: &[u8]| {
        let words = [&f[26..30], &f[30..34]].concat();
        let mut sum: u32 = words.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        sum += 17 + u32::from(u16::from_be_bytes([f[38], f[39]]));
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    };
    let before = k.counters().unwrap();
    let mut pending = base.clone();
    pending[40..42].copy_from_slice(&pseudo(&base).to_be_bytes());
    assert!(!check_frame(&mut k, &mut r, &mut w, "checksum still to be taken", &pending));
    let mut none = base.clone();
    none[40..42].copy_from_slice(&[0, 0]);
    assert!(check_frame(&mut k, &mut r, &mut w, "no checksum", &none));
    let after = k.counters().unwrap();
    assert_eq!(after[Counter::DecapChecksumPending as usize] - before[Counter::DecapChecksumPending as usize], 2);

    let mutated_moves = mutations(&base, 4000, 0x9e37_79b9_7f4a_7c15)
        .filter(|f| check_frame(&mut k, &mut r, &mut w, &format!("mutated {f:02x?}"), f))
        .count();
    assert!(mutated_moves > 100, "only {mutated_moves} mutated frames were still plain enough to move");

    // The IPv4 fuzzer's seeds, whole IPv4 packets from C's mapping to the relay: what
    // the host's IPv4 receive would refuse or reassemble never moves.
    let path = format!("{}/../../fuzz/seeds/ipv4_udp", env!("CARGO_MANIFEST_DIR"));
    let mut seeds: Vec<_> =
        std::fs::read_dir(&path).unwrap_or_else(|e| panic!("{path}: {e}")).map(|e| e.unwrap()).collect();
    seeds.sort_by_key(|e| e.file_name());
    let mut moved = Vec::new();
    for e in seeds {
        let name = e.file_name().to_string_lossy().into_owned();
        let mut input = frame(C_MAPPED, &[])[..14].to_vec();
        input.extend(std::fs::read(e.path()).unwrap());
        if check_frame(&mut k, &mut r, &mut w, &format!("seed ipv4_udp/{name}"), &input) {
            moved.push(name);
        }
    }
    assert_eq!(
        moved,
        ["dont-fragment", "no-udp-checksum", "plain", "trailer-after-ip", "ttl-1", "udp-checksum-wrong"],
        "seeds moved"
    );
}

/// `n` mutations of a plain packet's frame `base` (deterministic from `seed`): any bit
/// of the outer IPv4 and UDP headers and of the IPv6 packet, and truncations.
fn mutations(base: &[u8], n: usize, seed: u64) -> impl Iterator<Item = Vec<u8>> + '_ {
    let mut rng = Rng(seed);
    (0..n).map(move |_| {
        let mut f = base.to_vec();
        for _ in 0..1 + rng.below(3) {
            let i = 14 + rng.below(f.len() - 14);
            f[i] ^= 1 << rng.below(8);
        }
        if rng.below(8) == 0 {
            f.truncate(14 + rng.below(f.len() - 13));
        }
        f
    })
}

/// Runs `body` in a network namespace of its own: a veth interface with the relay's
/// address, IPv4 forwarding on (the route look-up the encapsulation uses asks for it).
fn in_own_netns<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: changes this thread's network namespace only.
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare: {}", std::io::Error::last_os_error());
        let sh = |c: &str| {
            let st = Command::new("sh").args(["-ec", c]).status().unwrap();
            assert!(st.success(), "{c}");
        };
        sh("ip link set lo up; ip link add d0 type veth peer name d1; ip link set d0 up; ip link set d1 up; ip addr add 192.0.2.1/24 dev d0; \
            echo 1 > /proc/sys/net/ipv4/ip_forward");
        body()
    })
    .join()
    .unwrap()
}

/// An Ethernet frame of the IPv6 `packet` (the test run's skb wants one).
fn l2(packet: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
    f.extend(packet);
    f
}

#[test]
fn encapsulation_sends_only_what_the_relay_sends_and_exactly_so() {
    if !root() {
        return;
    }
    in_own_netns(|| {
        let (mut r, mut w) = relay_trusting_c();
        let mut k = load_with(&w);
        let cases: Vec<(&str, Vec<u8>, bool)> = vec![
            ("plain", udp6(NATIVE, C), true),
            ("large", ipv6(NATIVE, C, 64, &[7u8; 1232]), true),
            ("UDP with its sum", with_inner_sum(udp6(NATIVE, C)), true),
            ("large UDP with its sum", with_inner_sum(ipv6(NATIVE, C, 64, &[7u8; 1232])), true),
            ("TCP with its sum", with_inner_sum(tcp6(NATIVE, C, &[9u8; 1000])), true),
            ("TCP, its sum still to be taken", tcp6_pending(NATIVE, C, &[9u8; 1000]), true),
            ("UDP shorter than its payload", short_udp(with_inner_sum(ipv6(NATIVE, C, 64, &[7u8; 300]))), true),
            ("ICMPv6 with its sum", with_inner_sum(icmp6(NATIVE, C, 300)), true),
            ("from 6to4", udp6("2002:c000:201::1", C), false),
            ("from ISATAP", udp6("2001:db8::200:5efe:c000:201", C), false),
            ("to an unknown client", udp6(NATIVE, "2001:0:4136:e378:8000:63bf:3fff:fdd3"), false),
            ("to a native host", udp6(NATIVE, "2001:db8::6"), false),
            ("one byte more", [udp6(NATIVE, C), vec![0]].concat(), false),
        ];
        for (name, packet, moves) in cases {
            let input = l2(&packet);
            let out = k.test_run(Program::Encap, &input).unwrap();
            w.sent.clear();
            let proto = r.on_tun_answered(Duration::from_secs(12), &packet, &mut w);
            if !moves {
                assert_eq!((out.verdict, &out.packet), (TC_ACT_OK, &input), "{name}: left for userland untouched");
                continue;
            }
            assert_eq!(out.verdict, TC_ACT_REDIRECT, "{name}");
            assert_eq!(proto, Ok(Action::Forwarded), "{name}");
            assert_eq!(w.sent, vec![Sent::service(C_MAPPED, packet.clone())], "{name}");
            // The frame's Ethernet header, then IPv4 and UDP from the relay's address and
            // port to C's mapping, then the packet as the relay sends it.
            assert_eq!(&out.packet[..14], &input[..14]);
            let ip = Ipv4Packet::new_checked(&out.packet[14..]).unwrap();
            let repr = Ipv4Repr::parse(&ip).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!((repr.src_addr, repr.dst_addr, repr.protocol, repr.ttl), (RELAY_V4, *C_MAPPED.ip(), 17, 64));
            assert_eq!(repr.payload_len, 8 + packet.len());
            assert!(!ip.dont_frag(), "{name}: sent without DF, as the service socket does");
            let ports = outer_udp(name, &ip, RELAY_V4, *C_MAPPED.ip(), &packet);
            assert_eq!(ports, (3544, C_MAPPED.port()));
            assert_eq!(&ip.payload()[8..], &packet[..], "{name}");
        }
        // Silent for 30 s in the kernel's eyes: up to the relay, which bubbles.
        k.peers().trust(&a(C), C_MAPPED, monotonic_ns() - 31_000_000_000).unwrap();
        let input = l2(&udp6(NATIVE, C));
        let out = k.test_run(Program::Encap, &input).unwrap();
        assert_eq!((out.verdict, &out.packet), (TC_ACT_OK, &input), "a stale peer is the relay's");
        let c = k.counters().unwrap();
        assert_eq!(c[Counter::EncapForwarded as usize], 8);
        assert_eq!(c[Counter::EncapStale as usize], 1);
        assert_eq!(c[Counter::EncapSource as usize], 2);
    });
}

#[test]
fn the_peer_map_holds_its_cap_and_no_more() {
    if !root() {
        return;
    }
    let mut s = settings();
    s.peers = 100;
    let k = KernelPath::load(&s).unwrap_or_else(|e| panic!("{e}"));
    let peers = k.peers();
    let addr = |i: u16| Ipv6Addr::new(0x2001, 0, 0x4136, 0xe378, 0x8000, 0x63bf, 0x3fff, i);
    for i in 0..100 {
        peers.trust(&addr(i), C_MAPPED, 1).unwrap();
    }
    let err = peers.trust(&addr(100), C_MAPPED, 1).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::E2BIG), "{err}");
    // An update of a present peer still goes through, and a forgotten one frees a place.
    peers.trust(&addr(5), SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 9), 1), 2).unwrap();
    let entry = peers.get(&addr(5)).unwrap().unwrap();
    assert_eq!(
        (entry.mapped, entry.heard, entry.unanswered),
        (SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 9), 1), 2, None)
    );
    assert!(peers.forget(&addr(5)).unwrap());
    assert!(!peers.forget(&addr(5)).unwrap());
    peers.trust(&addr(100), C_MAPPED, 1).unwrap();
}

// The client's programs: the same, against the client's state machine.

/// The client's server.
const P: Ipv4Addr = Ipv4Addr::new(65, 54, 227, 120);
/// The client's service port, on RELAY_V4 (the lab's one local address).
const CLIENT_PORT: u16 = 40500;
/// Where the client's NAT maps it.
const CLIENT_MAPPED: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 7), CLIENT_PORT);
/// A native host the client reached through a relay at RELAY_R.
const HOST: &str = "2001:db8:1::100";
const RELAY_R: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 10), 3544);
const CLIENT_TUN: u32 = 7;

impl Random for Rng {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next() as u8;
        }
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A client qualified through P, trusting C at its embedded mapping (C's packet came
/// from there); its address, and the kernel's list as it filled it.
fn client_trusting_c() -> (Client<Rng>, Ipv6Addr, Recorder) {
    let mut cfg = ClientConfig::new(vec![ServerAddrs::new(P)]);
    (cfg.local_discovery, cfg.kernel_path) = (false, true);
    let mut c = Client::new(cfg, Rng(0x5eed));
    let mut w = Recorder::default();
    c.on_timer_answered(secs(1), &mut w);
    // The primary's answer, then the secondary's, both seeing CLIENT_MAPPED.
    for local in [Local::Primary, Local::Secondary] {
        let rs = w.sent.iter().rev().find(|s| s.from == Source::Service).expect("an RS").payload.clone();
        w.sent.clear();
        let mut server = Server::new(ServerConfig::new(P));
        let mut sw = Recorder::default();
        let _ = server.on_udp(secs(1), local, CLIENT_MAPPED, &rs, &mut sw);
        let ra = sw.sent.pop().expect("an RA");
        let from = SocketAddrV4::new(
            server.address(if ra.from == Source::Secondary { Local::Secondary } else { Local::Primary }),
            3544,
        );
        let _ = c.on_udp_answered(secs(1), Via::Service, from, &ra.payload, &mut w);
    }
    let me = std::iter::from_fn(|| c.poll_event())
        .find_map(|e| match e {
            ClientEvent::Up { address, .. } => Some(address),
            _ => None,
        })
        .expect("qualified");
    c.set_kernel_address(Some(me));
    let mut w = Recorder { kernel: Some(KernelModel::default()), ..Recorder::default() };
    assert_eq!(
        c.on_udp_answered(secs(2), Via::Service, C_MAPPED, &udp6(C, &me.to_string()), &mut w),
        Ok(Action::Forwarded)
    );
    assert_eq!(c.kernel_peers(), 1);
    (c, me, w)
}

fn client_settings() -> Settings {
    Settings { port: CLIENT_PORT, client_tun: Some(CLIENT_TUN), ..settings() }
}

fn load_client_with(w: &Recorder, me: Ipv6Addr) -> KernelPath {
    let k = KernelPath::load(&client_settings()).unwrap_or_else(|e| panic!("{e}"));
    for (addr, (mapped, _)) in &w.kernel.as_ref().unwrap().peers {
        k.peers().trust(addr, *mapped, monotonic_ns()).unwrap();
    }
    k.switch().set_address(Some(me)).unwrap();
    k
}

/// Runs the client's decapsulation on one frame to its service port; asserts it against
/// the client. Returns whether it moved.
fn check_client_frame(k: &mut KernelPath, c: &mut Client<Rng>, w: &mut Recorder, name: &str, input: &[u8]) -> bool {
    // XDP takes out of its tunnel what tc ingress would, whose UDP checksum is set or,
    // without one, whose inner packet's own sum holds, and marks it for tc ingress (its
    // Ethernet source); anything else it leaves as it was, to tc ingress.
    let xdp = k.test_run(Program::DecapXdp, input).unwrap();
    assert_eq!(xdp.verdict, XDP_PASS, "{name}: every packet goes on, moved or not");
    let xdp_moved = xdp.packet != input;
    let Some(out) = tc_ingress(k, 0, name, input) else {
        assert!(!xdp_moved, "{name}: XDP moved what tc cannot run on");
        return false;
    };
    if out.verdict == TC_ACT_OK {
        assert_eq!(out.packet, input, "{name}: changed, yet left for userland");
        assert!(!xdp_moved, "{name}: XDP moved what tc ingress leaves to userland");
        return false;
    }
    // Either way it takes only a packet whose own sum holds: by the outer sum's word, or
    // its own count.
    let holds = inner_sum_holds(&input[42..]) == Some(true);
    assert_eq!(xdp_moved, holds, "{name}: XDP moves what tc ingress does, if the inner packet's sum holds");
    assert_eq!(out.verdict, TC_ACT_REDIRECT, "{name}: into the Teredo interface");
    let ip = Ipv4Packet::new_checked(&input[14..]).unwrap_or_else(|e| panic!("{name}: moved a bad IPv4 header: {e:?}"));
    let repr = Ipv4Repr::parse(&ip).unwrap_or_else(|e| panic!("{name}: moved a bad IPv4 header: {e:?}"));
    assert_eq!((ip.header_len(), repr.protocol, repr.dst_addr), (20, 17, RELAY_V4), "{name}");
    let udp = UdpPacket::new_checked(ip.payload()).unwrap_or_else(|e| panic!("{name}: moved a bad UDP header: {e:?}"));
    assert_eq!((udp.dst_port(), usize::from(udp.len())), (CLIENT_PORT, ip.payload().len()), "{name}");
    let from = SocketAddrV4::new(repr.src_addr, udp.src_port());
    w.delivered.clear();
    w.sent.clear();
    let proto = c.on_udp_answered(secs(3), Via::Service, from, udp.payload(), w);
    assert_eq!(proto, Ok(Action::Forwarded), "{name}: the kernel moved what the client does not deliver");
    assert_eq!(w.delivered.len(), 1, "{name}");
    // The Ethernet header goes with the redirect into the Teredo interface, which has
    // none: only the IPv6 packet after it counts.
    assert_eq!(&out.packet[14..], &w.delivered[0][..], "{name}: not what the client delivers");
    if xdp_moved {
        // The same packet to the same Ethernet destination, its type IPv6, from the mark:
        // which tc ingress hands on to the Teredo interface as it is.
        assert_eq!(&xdp.packet[..6], &input[..6], "{name}: XDP's Ethernet destination");
        assert_eq!(xdp.packet[6] & 0x03, 0x02, "{name}: the mark, a unicast local address");
        assert_eq!(&xdp.packet[12..14], &[0x86, 0xdd], "{name}: XDP's frame type");
        assert_eq!(&xdp.packet[14..], &out.packet[14..], "{name}: XDP's packet differs from tc's");
        let handed = k.test_run(Program::TcIngress(0), &xdp.packet).unwrap();
        assert_eq!((handed.verdict, &handed.packet), (TC_ACT_REDIRECT, &xdp.packet), "{name}: XDP's, at tc");
        // Any other source, tc ingress leaves to the host.
        let mut forged = xdp.packet.clone();
        forged[11] ^= 1;
        let left = k.test_run(Program::TcIngress(0), &forged).unwrap();
        assert_eq!((left.verdict, &left.packet), (TC_ACT_OK, &forged), "{name}: another source, at tc");
    }
    true
}

#[test]
fn a_clients_decapsulation_moves_only_what_the_client_delivers_and_exactly_so() {
    if !root() {
        return;
    }
    let (mut c, me, mut w) = client_trusting_c();
    let mut k = load_client_with(&w, me);
    let me_s = me.to_string();
    let to_me = SocketAddrV4::new(RELAY_V4, CLIENT_PORT);
    let mut cases: Vec<(String, SocketAddrV4, Vec<u8>)> = vec![
        ("plain".into(), C_MAPPED, udp6(C, &me_s)),
        ("hop limit 1".into(), C_MAPPED, ipv6(C, &me_s, 1, &[0; 8])),
        ("to another Teredo address".into(), C_MAPPED, udp6(C, "2001:0:4136:e378:8000:63bf:3fff:fdd3")),
        ("to a native address".into(), C_MAPPED, udp6(C, NATIVE)),
        ("from another port".into(), SocketAddrV4::new(*C_MAPPED.ip(), 40001), udp6(C, &me_s)),
        ("from an unknown peer".into(), C_MAPPED, udp6("2001:0:4136:e378:8000:63bf:3fff:fdd3", &me_s)),
        ("from a native host at C's mapping".into(), C_MAPPED, udp6(NATIVE, &me_s)),
    ];
    let mut bubble = vec![0u8; 40];
    emit_bubble(&a(C), &me, 64, &mut bubble).unwrap();
    cases.push(("bubble".into(), C_MAPPED, bubble));
    let mut trailer = udp6(C, &me_s);
    trailer.extend([0x01, 0x04, 1, 2, 3, 4]);
    cases.push(("nonce trailer".into(), C_MAPPED, trailer));
    let mut origin = vec![0, 0, 0x63, 0xbf, 0x3f, 0xff, 0xfd, 0xd2];
    origin.extend(udp6(C, &me_s));
    cases.push(("origin indication".into(), C_MAPPED, origin));
    let mut moved = Vec::new();
    for (name, from, d) in &cases {
        if check_client_frame(&mut k, &mut c, &mut w, name, &frame_to(*from, to_me, d)) {
            moved.push(name.clone());
        }
    }
    assert_eq!(moved, ["plain", "hop limit 1"], "what the kernel moved into the Teredo interface");
    // Without a UDP checksum: tc ingress moves it, XDP only where the inner packet's
    // own sum holds (a driver's verdict on a missing sum would vouch for nothing), for
    // every length the sum's chunks take apart.
    let unsummed = |inner: Vec<u8>| {
        let mut f = frame_to(C_MAPPED, to_me, &inner);
        f[40..42].copy_from_slice(&[0, 0]);
        f
    };
    let mut xdp_took = 0;
    for n in [0, 1, 2, 3, 5, 236, 300, 491, 511, 512, 513, 1024, 1100, 1211] {
        let good = unsummed(with_inner_sum(tcp6(C, &me_s, &vec![0xa5; n])));
        assert!(check_client_frame(&mut k, &mut c, &mut w, &format!("no UDP checksum, TCP of {n} bytes"), &good));
        let mut bad = good.clone();
        *bad.last_mut().unwrap() ^= 0x40;
        assert!(check_client_frame(
            &mut k,
            &mut c,
            &mut w,
            &format!("no UDP checksum, a bad TCP sum, {n} bytes"),
            &bad
        ));
        let pending = unsummed(tcp6_pending(C, &me_s, &vec![0xa5; n]));
        assert!(check_client_frame(
            &mut k,
            &mut c,
            &mut w,
            &format!("no UDP checksum, TCP sum pending, {n} bytes"),
            &pending
        ));
        xdp_took += usize::from(k.test_run(Program::DecapXdp, &good).unwrap().packet != good);
        // With a UDP sum over the whole datagram, as a socket sends it: a driver's
        // "verified" would vouch for the bytes as the relay sent them, not for a segment
        // damaged before it, whose own sum fails (XDP leaves it).
        let summed = frame_to(C_MAPPED, to_me, &with_inner_sum(tcp6(C, &me_s, &vec![0xa5; n])));
        assert_ne!(summed[40..42], [0, 0]);
        assert!(check_client_frame(&mut k, &mut c, &mut w, &format!("UDP checksum, TCP of {n} bytes"), &summed));
        xdp_took += usize::from(k.test_run(Program::DecapXdp, &summed).unwrap().packet != summed);
        let mut damaged = with_inner_sum(tcp6(C, &me_s, &vec![0xa5; n]));
        *damaged.last_mut().unwrap() ^= 0x40;
        let damaged = frame_to(C_MAPPED, to_me, &damaged);
        let name = format!("UDP checksum over a damaged TCP segment, {n} bytes");
        assert!(check_client_frame(&mut k, &mut c, &mut w, &name, &damaged));
    }
    assert_eq!(xdp_took, 28, "XDP took every TCP segment whose own sum holds");
    assert!(check_client_frame(&mut k, &mut c, &mut w, "no UDP checksum, UDP without one", &unsummed(udp6(C, &me_s))));
    // A native IPv6 packet to the client's address on the Ethernet interface carries no
    // mark: tc ingress leaves it to the host, as it arrived.
    let mut native = frame_to(C_MAPPED, to_me, &[]);
    native.truncate(12);
    native.extend([0x86, 0xdd]);
    native.extend(udp6(C, &me_s));
    let out = k.test_run(Program::TcIngress(0), &native).unwrap();
    assert_eq!((out.verdict, &out.packet), (TC_ACT_OK, &native), "an unmarked IPv6 frame");
    // To the relay's port, not the client's: not ours.
    assert!(!check_client_frame(&mut k, &mut c, &mut w, "to port 3544", &frame(C_MAPPED, &udp6(C, &me_s))));

    let base = frame_to(C_MAPPED, to_me, &udp6(C, &me_s));
    let mutated_moves = mutations(&base, 2000, 0x2545_f491_4f6c_dd1d)
        .filter(|f| check_client_frame(&mut k, &mut c, &mut w, &format!("mutated {f:02x?}"), f))
        .count();
    assert!(mutated_moves > 50, "only {mutated_moves} mutated frames were still plain enough to move");

    // Without an address (lost, or changing), nothing moves: not to the old one, and
    // not to the unspecified address the empty setting would spell.
    k.switch().set_address(None).unwrap();
    for f in [base.clone(), frame_to(C_MAPPED, to_me, &udp6(C, "::"))] {
        let out = k.test_run(Program::TcIngress(0), &f).unwrap();
        assert_eq!((out.verdict, &out.packet), (TC_ACT_OK, &f));
    }
}

#[test]
fn a_clients_encapsulation_sends_only_what_the_client_sends_and_watches_native_peers() {
    if !root() {
        return;
    }
    in_own_netns(|| {
        let (mut c, me, mut w) = client_trusting_c();
        let mut k = load_client_with(&w, me);
        let me_s = me.to_string();
        let cases: Vec<(&str, Vec<u8>, bool)> = vec![
            ("plain", udp6(&me_s, C), true),
            ("large", ipv6(&me_s, C, 64, &[7u8; 1232]), true),
            ("from another source", udp6(NATIVE, C), false),
            ("to an unknown peer", udp6(&me_s, "2001:0:4136:e378:8000:63bf:3fff:fdd3"), false),
            ("one byte more", [udp6(&me_s, C), vec![0]].concat(), false),
        ];
        for (name, packet, moves) in cases {
            let input = l2(&packet);
            let out = k.test_run(Program::Encap, &input).unwrap();
            w.sent.clear();
            let _ = c.on_tun_answered(secs(3), &packet, &mut w);
            if !moves {
                assert_eq!((out.verdict, &out.packet), (TC_ACT_OK, &input), "{name}: left for userland untouched");
                continue;
            }
            assert_eq!(out.verdict, TC_ACT_REDIRECT, "{name}");
            assert_eq!(w.sent, vec![Sent::service(C_MAPPED, packet.clone())], "{name}");
            let ip = Ipv4Packet::new_checked(&out.packet[14..]).unwrap();
            let repr = Ipv4Repr::parse(&ip).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!((repr.src_addr, repr.dst_addr, repr.protocol), (RELAY_V4, *C_MAPPED.ip(), 17), "{name}");
            let ports = outer_udp(name, &ip, RELAY_V4, *C_MAPPED.ip(), &packet);
            assert_eq!(ports, (CLIENT_PORT, C_MAPPED.port()), "{name}: from the client's port");
            assert_eq!(&ip.payload()[8..], &packet[..], "{name}");
        }

        // A native host through its relay: sent to while it answers; after a second of
        // silence since the first unanswered packet, its packets go up (userland tests
        // its relay again); once it is heard again, they move again. A Teredo peer is
        // not watched so.
        let two_ago = monotonic_ns() - 2_000_000_000;
        k.peers().trust(&a(HOST), RELAY_R, two_ago).unwrap();
        k.peers().trust(&a(C), C_MAPPED, two_ago).unwrap();
        let to_host = l2(&udp6(&me_s, HOST));
        let to_c = l2(&udp6(&me_s, C));
        assert_eq!(k.test_run(Program::Encap, &to_host).unwrap().verdict, TC_ACT_REDIRECT, "the first since heard");
        assert_eq!(k.test_run(Program::Encap, &to_c).unwrap().verdict, TC_ACT_REDIRECT);
        let first = k.peers().get(&a(HOST)).unwrap().unwrap().unanswered.expect("the first unanswered send is kept");
        assert_eq!(k.test_run(Program::Encap, &to_host).unwrap().verdict, TC_ACT_REDIRECT, "within the second");
        assert_eq!(k.peers().get(&a(HOST)).unwrap().unwrap().unanswered, Some(first), "the first, not the last");
        std::thread::sleep(Duration::from_millis(1050));
        let out = k.test_run(Program::Encap, &to_host).unwrap();
        assert_eq!((out.verdict, &out.packet), (TC_ACT_OK, &to_host), "silent for a second: up to userland");
        assert_eq!(k.test_run(Program::Encap, &to_c).unwrap().verdict, TC_ACT_REDIRECT, "a Teredo peer is not watched");
        // Its answer, through RELAY_R, moves in the kernel and ends the silence.
        let answer = frame_to(RELAY_R, SocketAddrV4::new(RELAY_V4, CLIENT_PORT), &udp6(HOST, &me_s));
        assert_eq!(k.test_run(Program::TcIngress(0), &answer).unwrap().verdict, TC_ACT_REDIRECT);
        assert_eq!(k.peers().get(&a(HOST)).unwrap().unwrap().unanswered, None);
        assert_eq!(k.test_run(Program::Encap, &to_host).unwrap().verdict, TC_ACT_REDIRECT);
        // An answer within the last-heard time's grain still answers: heard at once.
        assert!(k.peers().get(&a(HOST)).unwrap().unwrap().unanswered.is_some());
        assert_eq!(k.test_run(Program::TcIngress(0), &answer).unwrap().verdict, TC_ACT_REDIRECT);
        assert_eq!(k.peers().get(&a(HOST)).unwrap().unwrap().unanswered, None, "answered within 100 ms");
        let counts = k.counters().unwrap();
        assert_eq!(counts[Counter::EncapSilent as usize], 1);
        assert_eq!(counts[Counter::EncapSource as usize], 1);
    });
}

// A relay forwarding directly (`KernelForward direct`).
#[path = "programs/direct.rs"]
mod direct;

/// The Teredo interface's guard: what the daemon writes into its TUN enters the host only
/// as IPv6 (IPv4 forwarding is on for that interface, for the encapsulation's route
/// look-up): an IPv4 packet a subverted daemon wrote there would be forwarded from any
/// source it chose. Dropped and counted; IPv6 goes on (#60, 7).
#[test]
fn the_teredo_interfaces_guard_lets_in_ipv6_alone() {
    if !root() {
        return;
    }
    let mut path = KernelPath::load(&settings()).unwrap_or_else(|e| panic!("{e}"));
    let v4 = frame_to(
        SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 99), 53),
        SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 1), 53),
        b"spoofed",
    );
    let run = path.test_run(Program::Guard, &v4).unwrap();
    assert_eq!(run.verdict, 2, "IPv4 into the Teredo interface: TC_ACT_SHOT");
    let run = path.test_run(Program::Guard, &l2(&udp6(NATIVE, C))).unwrap();
    assert_eq!(run.verdict, 0, "IPv6: TC_ACT_OK");
    let counts = path.counters().unwrap();
    assert_eq!(counts[Counter::GuardNotIpv6 as usize], 1);
}
