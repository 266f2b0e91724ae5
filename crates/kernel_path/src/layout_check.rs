//! The layouts userland shares with the programs (`maps.rs`: the peers, the frozen
//! settings, the run-time ones), checked against what the compiler made of
//! `bpf/shared.h`: each field's offset and each struct's size as the object's BTF
//! records them (read with bpftool, which the test command installs).
//! Before this check, only the sizes were compared: two fields swapped, or one moved
//! within the same size, passed.

use crate::maps::{ConfigValue, FrozenValue, PeerValue};
use std::mem::{offset_of, size_of};

/// Each member of C struct `name` with its byte offset, and the struct's size, from
/// bpftool's raw dump of the object's BTF.
fn c_struct(dump: &str, name: &str) -> Option<(Vec<(String, usize)>, usize)> {
    let head = format!("STRUCT '{name}' size=");
    let mut lines = dump.lines().skip_while(|l| !l.contains(&head));
    let first = lines.next()?;
    let size = first.split("size=").nth(1)?.split_whitespace().next()?.parse().ok()?;
    let members = lines
        .take_while(|l| l.starts_with('\t'))
        .filter_map(|l| {
            let member = l.trim().strip_prefix('\'')?.split('\'').next()?.to_string();
            let bits: usize = l.split("bits_offset=").nth(1)?.split_whitespace().next()?.parse().ok()?;
            Some((member, bits / 8))
        })
        .collect();
    Some((members, size))
}

#[test]
fn the_shared_layouts_match_the_programs_btf() {
    if !crate::built() {
        eprintln!("skipped: this build has no programs (no `programs` feature)");
        return;
    }
    let object = concat!(env!("OUT_DIR"), "/teredo.bpf.o");
    let dump = match std::process::Command::new("bpftool").args(["btf", "dump", "file", object]).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        other => {
            let required = std::env::var("SHIPWORM_E2E").is_ok_and(|v| v == "required");
            assert!(!required, "bpftool could not read the programs' BTF ({other:?}): apt-get install bpftool");
            eprintln!("skipped: no bpftool to read the programs' BTF");
            return;
        }
    };
    let peer = [
        ("ip", offset_of!(PeerValue, ip)),
        ("port", offset_of!(PeerValue, port)),
        ("spare", offset_of!(PeerValue, spare)),
        ("heard", offset_of!(PeerValue, heard)),
        // The union of a client's `sent` and a direct relay's `route`.
        ("(anon)", offset_of!(PeerValue, sent)),
    ];
    let frozen = [
        ("source", offset_of!(FrozenValue, source)),
        ("port", offset_of!(FrozenValue, port)),
        ("ttl", offset_of!(FrozenValue, ttl)),
        ("client", offset_of!(FrozenValue, client)),
        ("prefix", offset_of!(FrozenValue, prefix)),
        ("direct", offset_of!(FrozenValue, direct)),
        ("spare", offset_of!(FrozenValue, spare)),
        ("tun", offset_of!(FrozenValue, tun)),
        ("slot_key", offset_of!(FrozenValue, slot_key)),
        ("slot_mask", offset_of!(FrozenValue, slot_mask)),
        ("validity_ns", offset_of!(FrozenValue, validity_ns)),
        ("heard_grain_ns", offset_of!(FrozenValue, heard_grain_ns)),
        ("silence_ns", offset_of!(FrozenValue, silence_ns)),
        ("teredo", offset_of!(FrozenValue, teredo)),
        ("decapsulated", offset_of!(FrozenValue, decapsulated)),
        ("spare2", offset_of!(FrozenValue, spare2)),
    ];
    let config = [
        ("local", offset_of!(ConfigValue, local)),
        ("own", offset_of!(ConfigValue, own)),
        ("routes", offset_of!(ConfigValue, routes)),
        ("routes4", offset_of!(ConfigValue, routes4)),
        ("enabled", offset_of!(ConfigValue, enabled)),
        ("l2", offset_of!(ConfigValue, l2)),
        ("single_path", offset_of!(ConfigValue, single_path)),
        ("spare", offset_of!(ConfigValue, spare)),
    ];
    for (name, rust, size) in [
        ("peer", &peer[..], size_of::<PeerValue>()),
        ("frozen", &frozen[..], size_of::<FrozenValue>()),
        ("config", &config[..], size_of::<ConfigValue>()),
    ] {
        let (c, c_size) = c_struct(&dump, name).unwrap_or_else(|| panic!("no struct {name} in the programs' BTF"));
        let rust: Vec<(String, usize)> = rust.iter().map(|&(n, o)| (n.to_string(), o)).collect();
        assert_eq!(c, rust, "struct {name}: the programs' fields and offsets (left) differ from maps.rs's (right)");
        assert_eq!(c_size, size, "struct {name}: the programs' size differs from maps.rs's");
    }
}
