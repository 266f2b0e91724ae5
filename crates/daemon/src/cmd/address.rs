//! `shipworm address`: decode a Teredo address into its parts, or encode one.

use crate::cli::AddressArgs;
use crate::runtime::Failure;
use serde::Serialize;
use shipworm_proto::transmit::Random;
use shipworm_wire::ipv4_scope::non_global_reason;
use shipworm_wire::teredo_addr::{Flags, TeredoAddr, PREFIX, PREFIX_EXPERIMENTAL};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

/// Everything a user may want to know about one Teredo address.
#[derive(Debug, Serialize, PartialEq)]
struct Report {
    address: String,
    prefix: String,
    prefix_kind: &'static str,
    server: Ipv4Addr,
    server_global: bool,
    flags: String,
    cone: bool,
    random_bits: u16,
    rfc5991_conformant: bool,
    conformance: &'static str,
    mapped: SocketAddrV4,
    mapped_address: Ipv4Addr,
    mapped_port: u16,
    mapped_global: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    mapped_not_global_because: Option<&'static str>,
}

impl Report {
    fn new(t: &TeredoAddr) -> Report {
        let conformance = t.flags.conformance();
        let why = non_global_reason(*t.mapped.ip());
        Report {
            address: t.to_ipv6().to_string(),
            prefix: format!("{:x}:{:x}::/32", t.prefix >> 16, t.prefix & 0xffff),
            prefix_kind: match t.prefix {
                PREFIX => "global Teredo prefix, RFC 4380",
                PREFIX_EXPERIMENTAL => "pre-RFC experimental prefix",
                _ => "custom prefix",
            },
            server: t.server,
            server_global: non_global_reason(t.server).is_none(),
            flags: format!("{:#06x}", t.flags.0),
            cone: t.flags.cone(),
            random_bits: t.flags.random_bits(),
            rfc5991_conformant: conformance.is_rfc5991(),
            conformance: conformance.describe(),
            mapped: t.mapped,
            mapped_address: *t.mapped.ip(),
            mapped_port: t.mapped.port(),
            mapped_global: why.is_none(),
            mapped_not_global_because: why,
        }
    }

    fn text(&self) -> String {
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        let global = match self.mapped_not_global_because {
            None => "global unicast".to_string(),
            Some(why) => format!("NOT global unicast: {why}"),
        };
        let server_note = if self.server_global { "" } else { " (not global unicast)" };
        format!(
            "address      {}\n\
             prefix       {} ({})\n\
             server       {}{}\n\
             flags        {}\n\
             \x20 cone       {}\n\
             \x20 random     {:#05x} ({} of 12 bits set)\n\
             \x20 RFC 5991   {} — {}\n\
             mapped       {} ({})\n",
            self.address,
            self.prefix,
            self.prefix_kind,
            self.server,
            server_note,
            self.flags,
            yes_no(self.cone),
            self.random_bits,
            self.random_bits.count_ones(),
            yes_no(self.rfc5991_conformant),
            self.conformance,
            self.mapped,
            global,
        )
    }
}

/// Run the subcommand.
pub fn run(args: &AddressArgs) -> Result<(), Failure> {
    let teredo = match (&args.address, &args.server, &args.mapped) {
        (Some(text), _, _) => decode(text, args.prefix.as_deref())?,
        (None, Some(server), Some(mapped)) => encode(args, server, mapped)?,
        _ => return Err(Failure::usage("give an ADDRESS to decode, or --server and --mapped to encode")),
    };
    let report = Report::new(&teredo);
    if args.json {
        let json = serde_json::to_string_pretty(&report).expect("report serializes");
        println!("{json}");
    } else if args.address.is_some() {
        print!("{}", report.text());
    } else {
        println!("{}", report.address);
    }
    Ok(())
}

fn parse_prefix(text: &str) -> Result<u32, Failure> {
    let (addr, len) = match text.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (text, None),
    };
    if len.is_some_and(|l| l != "32") {
        return Err(Failure::usage(format!("--prefix {text}: a Teredo prefix is a /32")));
    }
    let a: Ipv6Addr =
        addr.parse().map_err(|_| Failure::usage(format!("--prefix {text}: not an IPv6 prefix (try 2001:0::/32)")))?;
    let o = a.octets();
    if o[4..].iter().any(|&b| b != 0) {
        return Err(Failure::usage(format!("--prefix {text}: bits beyond the first 32 are set")));
    }
    Ok(u32::from_be_bytes([o[0], o[1], o[2], o[3]]))
}

fn decode(text: &str, prefix: Option<&str>) -> Result<TeredoAddr, Failure> {
    let addr: Ipv6Addr = text.trim().parse().map_err(|_| Failure::usage(format!("'{text}' is not an IPv6 address")))?;
    let found = match prefix {
        Some(p) => TeredoAddr::decode_with_prefix(&addr, parse_prefix(p)?),
        None => TeredoAddr::decode(&addr),
    };
    found.ok_or_else(|| {
        let seg = addr.segments();
        let accepted = prefix.map_or("2001:0::/32 or 3ffe:831f::/32".to_string(), str::to_string);
        Failure::usage(format!(
            "{addr} is not a Teredo address: its prefix {:x}:{:x}::/32 is not {accepted} (--prefix decodes another)",
            seg[0], seg[1]
        ))
    })
}

fn parse_random_bits(text: &str) -> Result<u16, Failure> {
    if text == "random" {
        let mut b = [0u8; 2];
        crate::runtime::random::OsRandom::open()?.fill(&mut b);
        return Ok(u16::from_be_bytes(b) & 0x0fff);
    }
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u16::from_str_radix(hex, 16),
        None => text.parse::<u16>(),
    };
    match parsed {
        Ok(v) if v <= 0x0fff => Ok(v),
        _ => Err(Failure::usage(format!("--random-bits {text}: expected 0–4095 (12 bits), 0x hex, or 'random'"))),
    }
}

fn encode(args: &AddressArgs, server: &str, mapped: &str) -> Result<TeredoAddr, Failure> {
    let server: Ipv4Addr =
        server.parse().map_err(|_| Failure::usage(format!("--server {server}: not an IPv4 address")))?;
    let mapped: SocketAddrV4 = mapped
        .parse()
        .map_err(|_| Failure::usage(format!("--mapped {mapped}: expected IPV4:PORT, e.g. 192.0.2.45:40000")))?;
    if let Some(why) = non_global_reason(server) {
        return Err(Failure::usage(format!(
            "--server {server} is not global unicast ({why}); a Teredo server needs a public IPv4 address"
        )));
    }
    if let Some(why) = non_global_reason(*mapped.ip()) {
        return Err(Failure::usage(format!(
            "--mapped {mapped} is not global unicast ({why}); a Teredo address embeds the NAT's public mapping"
        )));
    }
    let random = args.random_bits.as_deref().map(parse_random_bits).transpose()?.unwrap_or(0);
    let prefix = args.prefix.as_deref().map(parse_prefix).transpose()?.unwrap_or(PREFIX);
    Ok(TeredoAddr { prefix, server, flags: Flags::new(args.cone, random), mapped })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_example_report() {
        let t = decode("2001:0:303:303:8000:e148:fefe:fefe", None).unwrap();
        let r = Report::new(&t);
        assert_eq!(r.server, Ipv4Addr::new(3, 3, 3, 3));
        assert_eq!(r.mapped, "1.1.1.1:7863".parse().unwrap());
        assert!(r.cone && r.mapped_global && !r.rfc5991_conformant);
        assert!(r.text().contains("mapped       1.1.1.1:7863 (global unicast)"));
    }

    #[test]
    fn prefixes() {
        assert_eq!(parse_prefix("3ffe:831f::").unwrap(), PREFIX_EXPERIMENTAL);
        assert_eq!(parse_prefix("2001:0::/32").unwrap(), PREFIX);
        assert!(parse_prefix("2001:0::/48").is_err());
        assert!(parse_prefix("2001:0:1::").is_err());
    }

    #[test]
    fn random_bits_bounds() {
        assert_eq!(parse_random_bits("0xabc").unwrap(), 0xabc);
        assert_eq!(parse_random_bits("4095").unwrap(), 4095);
        assert!(parse_random_bits("4096").is_err());
        assert!(parse_random_bits("random").unwrap() <= 0xfff);
    }
}
