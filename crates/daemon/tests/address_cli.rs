//! `shipworm address` as a user runs it: stdout, stderr and exit status.

use std::process::{Command, Output};

fn shipworm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shipworm")).args(args).output().expect("binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// Exit status 2 and exactly one line on stderr that contains `why`.
fn assert_refused(args: &[&str], why: &str) {
    let o = shipworm(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{args:?}: want one line, got {err:?}");
    assert!(err.contains(why), "{args:?}: {err:?} does not say {why:?}");
    assert!(o.stdout.is_empty());
}

#[test]
fn decodes_the_seed_example() {
    let o = shipworm(&["address", "2001:0:303:303:8000:e148:fefe:fefe"]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(out.contains("server       3.3.3.3\n"), "{out}");
    assert!(out.contains("cone       yes"), "{out}");
    assert!(out.contains("mapped       1.1.1.1:7863 (global unicast)"), "{out}");
    assert!(out.contains("RFC 5991   no"), "{out}");
}

#[test]
fn encodes_the_seed_examples() {
    let o = shipworm(&["address", "--server", "3.3.3.3", "--mapped", "1.1.1.1:7863", "--cone"]);
    assert!(o.status.success());
    assert_eq!(stdout(&o), "2001:0:303:303:8000:e148:fefe:fefe\n");
    let o = shipworm(&[
        "address",
        "--server",
        "3.3.3.3",
        "--mapped",
        "1.1.1.1:2048",
        "--cone",
        "--prefix",
        "3ffe:831f::/32",
    ]);
    assert_eq!(stdout(&o), "3ffe:831f:303:303:8000:f7ff:fefe:fefe\n");
}

#[test]
fn encodes_rfc5991_random_bits() {
    let o =
        shipworm(&["address", "--server", "65.54.227.120", "--mapped", "192.0.2.45:40000", "--random-bits", "0xabc"]);
    assert_eq!(stdout(&o), "2001:0:4136:e378:28bc:63bf:3fff:fdd2\n");
    // `random` yields a conformant address that still decodes to the same mapping.
    let o = shipworm(&[
        "address",
        "--server",
        "65.54.227.120",
        "--mapped",
        "192.0.2.45:40000",
        "--random-bits",
        "random",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["mapped"], "192.0.2.45:40000");
    assert!(v["random_bits"].as_u64().unwrap() <= 0xfff);
}

#[test]
fn json_decode_has_every_field() {
    let o = shipworm(&["address", "--json", "2001:0:4136:e378:28bc:63bf:3fff:fdd2"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["server"], "65.54.227.120");
    assert_eq!(v["flags"], "0x28bc");
    assert_eq!(v["cone"], false);
    assert_eq!(v["random_bits"], 0xabc);
    assert_eq!(v["rfc5991_conformant"], true);
    assert_eq!(v["mapped_address"], "192.0.2.45");
    assert_eq!(v["mapped_port"], 40000);
    assert_eq!(v["mapped_global"], true);
    assert_eq!(v["prefix"], "2001:0::/32");
}

#[test]
fn reports_a_non_global_mapping() {
    // ~10.0.0.5 port ~3544: private, which a real Teredo address never embeds.
    let o = shipworm(&["address", "--json", "2001:0:4136:e378:0:f227:f5ff:fffa"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["mapped"], "10.0.0.5:3544");
    assert_eq!(v["mapped_global"], false);
    assert_eq!(v["mapped_not_global_because"], "private (10.0.0.0/8)");
}

#[test]
fn refuses_bad_input_with_one_line_and_status_2() {
    assert_refused(&["address", "2001:db8::1"], "not a Teredo address");
    assert_refused(&["address", "not-an-address"], "not an IPv6 address");
    assert_refused(&["address", "192.0.2.1"], "not an IPv6 address");
    assert_refused(&["address"], "required");
    assert_refused(&["address", "--server", "3.3.3.3"], "--mapped");
    assert_refused(&["address", "--server", "3.3.3.3", "--mapped", "1.1.1.1"], "IPV4:PORT");
    assert_refused(&["address", "--server", "3.3.3.3", "--mapped", "10.1.1.1:1"], "not global unicast");
    assert_refused(&["address", "--server", "3.3.3.3", "--mapped", "1.1.1.1:1", "--random-bits", "4096"], "0–4095");
    assert_refused(&["address", "--bogus"], "unexpected argument");
    assert_refused(&["address", "2001:0:303:303::1", "--server", "3.3.3.3"], "cannot be used");
}

#[test]
fn output_to_a_reader_that_left_ends_quietly() {
    // `shipworm address … | head -0`: the pipe's reader is gone before anything is
    // written; the command stops without a panic's backtrace on stderr.
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let o = Command::new(env!("CARGO_BIN_EXE_shipworm"))
        .args(["address", "2001:0:303:303:8000:e148:fefe:fefe"])
        .stdout(writer)
        .output()
        .expect("binary runs");
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}
