//! The layouts userland shares with the programs (`maps.rs`), checked against what the
//! compiler made of `bpf/shared.h`: each field's offset and each struct's size as the
//! object's BTF records them (read with bpftool, which the test command installs).
//! Before this check, only the sizes were compared: two fields swapped, or one moved
//! within the same size, passed.

use crate::maps::{ConfigValue, PeerValue};
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
    let config = [
        ("local", offset_of!(ConfigValue, local)),
        ("source", offset_of!(ConfigValue, source)),
        ("port", offset_of!(ConfigValue, port)),
        ("ttl", offset_of!(ConfigValue, ttl)),
        ("enabled", offset_of!(ConfigValue, enabled)),
        ("prefix", offset_of!(ConfigValue, prefix)),
        ("l2", offset_of!(ConfigValue, l2)),
        ("client", offset_of!(ConfigValue, client)),
        ("direct", offset_of!(ConfigValue, direct)),
        ("single_path", offset_of!(ConfigValue, single_path)),
        ("tun", offset_of!(ConfigValue, tun)),
        ("own", offset_of!(ConfigValue, own)),
        ("routes", offset_of!(ConfigValue, routes)),
        ("slot_key", offset_of!(ConfigValue, slot_key)),
        ("slot_mask", offset_of!(ConfigValue, slot_mask)),
        ("routes4", offset_of!(ConfigValue, routes4)),
        ("validity_ns", offset_of!(ConfigValue, validity_ns)),
        ("heard_grain_ns", offset_of!(ConfigValue, heard_grain_ns)),
        ("silence_ns", offset_of!(ConfigValue, silence_ns)),
        ("teredo", offset_of!(ConfigValue, teredo)),
    ];
    for (name, rust, size) in
        [("peer", &peer[..], size_of::<PeerValue>()), ("config", &config[..], size_of::<ConfigValue>())]
    {
        let (c, c_size) = c_struct(&dump, name).unwrap_or_else(|| panic!("no struct {name} in the programs' BTF"));
        let rust: Vec<(String, usize)> = rust.iter().map(|&(n, o)| (n.to_string(), o)).collect();
        assert_eq!(c, rust, "struct {name}: the programs' fields and offsets (left) differ from maps.rs's (right)");
        assert_eq!(c_size, size, "struct {name}: the programs' size differs from maps.rs's");
    }
}
