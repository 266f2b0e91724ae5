//! `shipworm lab`: build the namespace lab, run the Teredo roles in it, and show step
//! by step that a client behind a NAT gets working IPv6.

use crate::cli::LabArgs;
use crate::runtime::Failure;
use shipworm_lab::scenario::{self, Scenario, Side};
use shipworm_lab::{netns, Impl, NatKind};
use shipworm_wire::teredo_addr::TeredoAddr;

/// Roles shipworm can play today; the others are played by Miredo, and said so.
const SHIPWORM_HAS: [(&str, bool); 3] = [("server", true), ("relay", true), ("client", true)];

/// Run the subcommand.
pub fn run(args: &LabArgs) -> Result<(), Failure> {
    if args.cleanup {
        let n = netns::remove_stale().map_err(|e| Failure::runtime(e.to_string()))?;
        println!("removed {n} namespace(s) left by earlier lab runs");
        return Ok(());
    }
    let nat: NatKind = args.nat.parse().map_err(Failure::usage)?;
    let me = std::env::current_exe().map_err(|e| Failure::runtime(format!("cannot find this binary: {e}")))?;
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
    };
    let mut n = 0;
    let mut say = |line: &str| {
        n += 1;
        println!("[{n}] {line}");
    };
    match scenario::run(&s, &mut say) {
        Ok((mut lab, outcome)) => {
            if let Some(t) = TeredoAddr::decode(&outcome.address) {
                println!(
                    "    address decoded: server {}, mapped {}, random bits {:#05x} (the lab's {} NAT is at {})",
                    t.server,
                    t.mapped,
                    t.flags.random_bits(),
                    nat,
                    lab.clients[0].nat_public,
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
                println!("tear it down with: shipworm lab --cleanup");
            }
            Ok(())
        }
        Err(e) => {
            if args.keep {
                eprintln!("the lab keeps running for a look inside; remove it with: shipworm lab --cleanup");
            }
            Err(Failure::runtime(e.to_string()))
        }
    }
}
