//! `shipworm-lab`: build the namespace lab, run the Teredo roles in it, and show step
//! by step that a client behind a NAT gets working IPv6. A tool beside the product: the
//! `shipworm` binary it runs knows nothing of the lab.

use clap::Parser;
use shipworm_lab::scenario::{self, Scenario, Side};
use shipworm_lab::{netns, Impl, NatKind};
use shipworm_wire::teredo_addr::TeredoAddr;
use std::process::ExitCode;

/// shipworm-lab — build a little Internet of network namespaces (server, relay, NAT,
/// client, native IPv6 host), run Teredo in it, and check ping6 and TCP both ways. Root.
#[derive(Debug, Parser)]
#[command(name = "shipworm-lab", version, about)]
struct LabArgs {
    /// The NAT in front of the client: full-cone, address-restricted, port-restricted,
    /// symmetric (a random port per destination), sequential (the next port per flow),
    /// port-preserving (symmetric, but an endpoint's first flow keeps its port),
    /// symmetric-upnp or symmetric-pcp (symmetric, with miniupnpd as UPnP or PCP gateway).
    #[arg(long, value_name = "KIND", default_value = "port-restricted")]
    nat: String,

    /// Leave the lab running and print how to enter each namespace.
    #[arg(long)]
    keep: bool,

    /// `miredo`: Debian's Miredo plays the server and the relay (interop).
    #[arg(long, value_name = "IMPL", value_parser = ["miredo"])]
    peer: Option<String>,

    /// Bytes in each TCP transfer.
    #[arg(long, default_value_t = 10_000_000)]
    bytes: usize,

    /// Who sends the very first packet: `native` (the native host calls the client) or
    /// `client`.
    #[arg(long, value_name = "SIDE", default_value = "native", value_parser = ["native", "client"])]
    first: String,

    /// The shipworm binary that plays the roles (default: `shipworm` beside this one).
    #[arg(long, value_name = "FILE")]
    shipworm: Option<std::path::PathBuf>,

    /// Remove what earlier runs left (after --keep, or a crash), then exit.
    #[arg(long)]
    cleanup: bool,
}

/// Roles shipworm can play today; the others are played by Miredo, and said so.
const SHIPWORM_HAS: [(&str, bool); 3] = [("server", true), ("relay", true), ("client", true)];

/// The shipworm binary to run: `--shipworm`, or the one beside this one.
fn shipworm_binary(args: &LabArgs) -> Result<std::path::PathBuf, String> {
    let me = match &args.shipworm {
        Some(path) => path.clone(),
        None => {
            std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?.with_file_name("shipworm")
        }
    };
    if !me.is_file() {
        return Err(format!(
            "{} not found: build it (cargo build --release) or name it with --shipworm FILE",
            me.display()
        ));
    }
    Ok(me)
}

/// Run the subcommand.
fn run(args: &LabArgs) -> Result<(), String> {
    if args.cleanup {
        let n = netns::remove_stale().map_err(|e| e.to_string())?;
        println!("removed {n} namespace(s) left by earlier lab runs");
        return Ok(());
    }
    let nat: NatKind = args.nat.parse()?;
    let me = shipworm_binary(args)?;
    let pick = |role: &str| -> Impl {
        let has = SHIPWORM_HAS.iter().any(|&(r, h)| r == role && h);
        let miredo_peer = args.peer.as_deref() == Some("miredo") && role != "client";
        if has && !miredo_peer {
            Impl::Shipworm(me.clone())
        } else {
            if !has {
                println!("note: shipworm {role} is not built yet — Miredo plays the {role}");
            }
            Impl::Miredo
        }
    };
    let s = Scenario {
        nat,
        server: pick("server"),
        relay: pick("relay"),
        client: pick("client"),
        transfer_bytes: args.bytes,
        pings: 5,
        keep_on_failure: args.keep,
        first: if args.first == "client" { Side::Client } else { Side::Native },
        shipworm_extra: "",
        narrow_wan: None,
        software_sums: shipworm_lab::SoftwareSums::None,
    };
    let mut n = 0;
    let mut say = |line: &str| {
        n += 1;
        println!("[{n}] {line}");
    };
    match scenario::run(&s, &mut say) {
        Ok((mut lab, outcome)) => {
            if let Some(t) = TeredoAddr::decode(&outcome.address) {
                let at = lab.clients[0].nat_public;
                println!(
                    "    address decoded: server {}, mapped {}, random bits {:#05x} (the lab's {nat} NAT is at {at})",
                    t.server,
                    t.mapped,
                    t.flags.random_bits(),
                );
                match lab.client_status(0) {
                    Some(st) => println!("    NAT kind detected by the client: {}", st["nat"].as_str().unwrap_or("?")),
                    None => println!("    NAT kind detected: not reported — Miredo does not probe for it"),
                }
            }
            println!("all steps passed");
            if args.keep {
                lab.keep();
                println!("\nthe lab keeps running. Enter a host with:");
                for ns in lab.namespaces() {
                    println!("    ip netns exec {ns} bash");
                }
                println!("logs and configuration: {}", lab.dir().display());
                println!("tear it down with: shipworm-lab --cleanup");
            }
            Ok(())
        }
        Err(e) => {
            if args.keep {
                eprintln!("the lab keeps running for a look inside; remove it with: shipworm-lab --cleanup");
            }
            Err(e.to_string())
        }
    }
}

fn main() -> ExitCode {
    let args = LabArgs::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shipworm-lab: {e}");
            ExitCode::FAILURE
        }
    }
}
